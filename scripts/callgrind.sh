#!/usr/bin/env bash
# Instructions per forwarded `tools/call` (docs/benchmarks.md, "Profile"): the release gateway
# under callgrind with one worker thread, in front of the benchmark's fast 2025-11-25 backend
# over Streamable HTTP, driven over one keep-alive connection. Two runs, with FEW and MANY calls;
# per call = (instructions(MANY) - instructions(FEW)) / (MANY - FEW), so start-up, the first
# session and shutdown cancel out.
#
#   scripts/callgrind.sh [GATEWAY_BINARY]      (default: target/release/mrtr-gateway)
#   KEEP=DIR keeps the two callgrind outputs, for callgrind_annotate.
#
# Needs valgrind and python3. Every process started here is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/.."

FEW=${FEW:-200}
MANY=${MANY:-1200}
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/callgrind.* "$KEEP"/; fi
    rm -rf "$work"
}
trap cleanup EXIT

# The benchmark binary serves the fast backend; building it also builds a gateway with the
# dev-dependencies' features, so the measured gateway is built after it.
bench=$(cargo bench --locked --bench mrtr-bench --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "mrtr-bench" and m.get("executable"):
        print(m["executable"])')
if [ -z "${1:-}" ]; then
    cargo build --release --locked
fi
gateway=$(realpath "${1:-target/release/mrtr-gateway}")

# The backend prints its address, then serves until its stdin closes.
mkfifo "$work/backend-in"
"$bench" --serve-backend 127.0.0.1:0 <"$work/backend-in" >"$work/backend-addr" &
pids+=($!)
exec 3>"$work/backend-in"
for _ in $(seq 100); do [ -s "$work/backend-addr" ] && break; sleep 0.1; done
backend=$(head -1 "$work/backend-addr")

run() {
    local calls=$1 port
    cat >"$work/gateway.toml" <<TOML
[server]
listen = "127.0.0.1:0"
drain_timeout = "1s"
shutdown_delay = "0s"

[[route]]
path = "/mcp"
backend = "fast"

[backend.fast]
# The fast backend speaks both revisions: fixed to 2025-11-25, the legacy path is what is counted.
era = "2025-11-25"
transport = "http"
url = "http://$backend/mcp"
TOML
    : >"$work/gateway.log"
    TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.$calls" \
        "$gateway" --config "$work/gateway.toml" 2>"$work/gateway.log" &
    local gateway_pid=$!
    pids+=($gateway_pid)
    for _ in $(seq 600); do
        port=$(grep -o 'serving http://127.0.0.1:[0-9]*' "$work/gateway.log" | grep -o '[0-9]*$' || true)
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || { cat "$work/gateway.log" >&2; exit 1; }
    python3 - "$port" "$calls" <<'PY'
import http.client, json, sys
port, calls = int(sys.argv[1]), int(sys.argv[2])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
           "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"}
for i in range(calls):
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "hello from the benchmark"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}})
    conn.request("POST", "/mcp", body, headers)
    response = conn.getresponse()
    answer = json.loads(response.read())
    if response.status != 200 or "result" not in answer:
        sys.exit(f"call {i}: {response.status} {answer}")
PY
    kill -TERM "$gateway_pid"
    wait "$gateway_pid" || true
    grep -o 'summary: [0-9]*' "$work/callgrind.$calls" | grep -o '[0-9]*'
}

few=$(run "$FEW")
many=$(run "$MANY")
echo "instructions: $few ($FEW calls), $many ($MANY calls)"
echo "instructions per forwarded tools/call: $(( (many - few) / (MANY - FEW) ))"
