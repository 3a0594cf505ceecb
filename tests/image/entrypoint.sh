#!/usr/bin/env bash
# Runs the release binary the way the container image does and checks that it serves.
#
# The layout mirrors the image and the Helm chart: the binary at usr/local/bin/mrtr-gateway, the
# chart's rendered ConfigMap (helm/examples/default.yaml) at etc/mrtr-gateway/config.toml, the key
# ring laid out as the kubelet lays out a Secret volume, and a writable tmp that is HOME and TMPDIR.
# Everything else is read-only to the process, which runs as uid/gid 10001 when this script runs
# as root. The argv is the image's: --config <file>. Addresses move to free loopback ports, the
# shutdown delay to 1 s and the drain timeout to 3 s, POD_IP is 127.0.0.1 as the downward API
# would set it; nothing else in the configuration changes.
#
# Usage: tests/image/entrypoint.sh   (builds with cargo build --release --locked unless
#                                     MRTR_GATEWAY_BIN names a binary)
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -z "${MRTR_GATEWAY_BIN:-}" ]; then
  cargo build --release --locked --quiet
  MRTR_GATEWAY_BIN=target/release/mrtr-gateway
fi
src_bin="$(realpath "$MRTR_GATEWAY_BIN")"

source tests/image/checks.sh

root="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
  fi
  chmod -R u+w "$root" 2>/dev/null || true
  rm -rf "$root"
}
trap cleanup EXIT

# ---- the image's layout ---------------------------------------------------------------------------
mkdir -p "$root/usr/local/bin" "$root/etc/mrtr-gateway" "$root/tmp" \
         "$root/var/run/secrets/mrtr-gateway"
install -m 0755 "$src_bin" "$root/usr/local/bin/mrtr-gateway"
bin="$root/usr/local/bin/mrtr-gateway"
chmod 1777 "$root/tmp"

read -r port admin_port peer_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
for s in socks:
    s.close()
')

# The chart's ConfigMap: config.toml out of the rendered default example.
keys_dir="$root/var/run/secrets/mrtr-gateway"
python3 tests/image/chart_config.py helm/examples/default.yaml \
  '^listen = "0\.0\.0\.0:8080"$' "listen = \"127.0.0.1:$port\"" \
  '^admin_listen = "0\.0\.0\.0:9090"$' "admin_listen = \"127.0.0.1:$admin_port\"" \
  '^drain_timeout = "[0-9]+s"$' 'drain_timeout = "3s"' \
  '^command = "/usr/local/bin/mrtr-gateway"$' "command = \"$bin\"" \
  '^keys_file = "/var/run/secrets/mrtr-gateway/keys"$' "keys_file = \"$keys_dir/keys\"" \
  '^shutdown_delay = "[0-9]+s"$' 'shutdown_delay = "1s"' \
  '^advertise = "\$\{POD_IP\}:8081"$' "advertise = \"\${POD_IP}:$peer_port\"" \
  '^listen = "0\.0\.0\.0:8081"$' "listen = \"127.0.0.1:$peer_port\"" \
  > "$root/etc/mrtr-gateway/config.toml"

# The key ring as a Secret volume: keys -> ..data/keys, ..data -> a timestamped directory.
key1="$("$bin" keygen)"
key2="$("$bin" keygen)"
secret_version() { # NAME CONTENT: a new timestamped directory, swapped in atomically
  mkdir "$keys_dir/$1"
  printf '%s\n' "$2" > "$keys_dir/$1/keys"
  ln -s "$1" "$keys_dir/..data_tmp"
  mv -T "$keys_dir/..data_tmp" "$keys_dir/..data"
}
secret_version ..2026_01_01_00_00_00.1 "$key1"
ln -s ..data/keys "$keys_dir/keys"

# The pod's address, as the chart's Deployment sets it from the downward API.
export POD_IP=127.0.0.1

# Without an admin listener in the binary, leave admin_listen out.
admin=1
if ! check="$("$bin" check-config "$root/etc/mrtr-gateway/config.toml" 2>&1)"; then
  if grep -q "admin_listen" <<<"$check"; then
    admin=0
    sed -i '/^admin_listen = /d' "$root/etc/mrtr-gateway/config.toml"
    echo "note: this binary has no admin listener; admin checks skipped"
  fi
fi
if "$bin" check-config "$root/etc/mrtr-gateway/config.toml" >/dev/null; then
  pass "the chart's configuration passes check-config"
else
  fail "the chart's configuration passes check-config"
  exit 1
fi

# Read-only for the process: everything but tmp.
run_as=()
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
  chown -R root:root "$root"
  chown root:10001 "$keys_dir"/..2026_*/keys
  chmod 0440 "$keys_dir"/..2026_*/keys
  chmod -R go-w "$root"
  chmod 0755 "$root"
  chmod 1777 "$root/tmp"
  run_as=(setpriv --reuid=10001 --regid=10001 --clear-groups --)
  user="uid 10001"
else
  user="uid $(id -u)"
fi
find "$root" -path "$root/tmp" -prune -o -print | sort > "$root/tmp/.before"
for d in "$root" "$root/usr" "$root/usr/local" "$root/usr/local/bin" "$root/etc" \
         "$root/etc/mrtr-gateway" "$root/var" "$root/var/run" "$root/var/run/secrets"; do
  chmod a-w "$d"
done

# ---- start it as the image does ------------------------------------------------------------------
log="$(mktemp)"
(
  cd "$root"
  exec "${run_as[@]}" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$root/tmp" TMPDIR="$root/tmp" \
    MRTR_GATEWAY_LOG_FORMAT=json RUST_LOG=info POD_IP="$POD_IP" \
    "$bin" --config "$root/etc/mrtr-gateway/config.toml"
) 2>"$log" &
pid=$!
echo "gateway pid $pid as $user on 127.0.0.1:$port (admin 127.0.0.1:$admin_port)"

mcp() { mcp_post "http://127.0.0.1:$port/mcp" "$@"; } # METHOD MCP-NAME BODY
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
DISCOVER='{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{'"$META"'}}'

up=0
for _ in $(seq 1 150); do
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  if [ "$(mcp server/discover "" "$DISCOVER" | cut -d' ' -f1)" = 200 ]; then up=1; break; fi
  sleep 0.2
done
if [ "$up" = 1 ]; then pass "the gateway starts from --config"; else
  fail "the gateway starts from --config"; cat "$log"; exit 1; fi
if [ "${#run_as[@]}" -gt 0 ]; then
  if grep -Eq '^Uid:\s+10001\s' "/proc/$pid/status"; then pass "it runs as uid 10001"; else
    fail "it runs as uid 10001: $(grep '^Uid:' "/proc/$pid/status")"; fi
fi


json_check "server/discover answers 2026-07-28" \
  'code == 200 and r["result"]["supportedVersions"] == ["2026-07-28"] and r["result"]["resultType"] == "complete"' \
  "$(mcp server/discover "" "$DISCOVER")"

json_check "tools/call reaches the stdio demo backend" \
  'code == 200 and r["result"]["content"][0]["text"] == "hello"' \
  "$(mcp tools/call echo '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},'"$META"'}}')"

ASK='{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask_name","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}'
retry() { # STATE NAME
  mcp tools/call ask_name '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ask_name","arguments":{},"inputResponses":{"elicitation-1":{"action":"accept","content":{"name":"'"$2"'"}}},"requestState":"'"$1"'","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}'
}
state_of() { python3 -c 'import json,sys; print(json.loads(sys.argv[1].split(" ",1)[1])["result"]["requestState"])' "$1"; }

round="$(mcp tools/call ask_name "$ASK")"
json_check "a call that needs input is held (input_required)" \
  'code == 200 and r["result"]["resultType"] == "input_required"' "$round"
json_check "the retry, sealed with the mounted key ring, completes it" \
  'code == 200 and r["result"]["content"][0]["text"] == "Hello, Ada!"' "$(retry "$(state_of "$round")" Ada)"

# Key rotation the way a Secret update arrives: a new key first, the old one still listed.
round="$(mcp tools/call ask_name "$ASK")"
before="$(grep -c 'requestState keys reloaded' "$log" || true)"
secret_version ..2026_01_01_00_05_00.2 "$key2
$key1"
reloaded=0
for _ in $(seq 1 50); do
  if [ "$(grep -c 'requestState keys reloaded' "$log" || true)" -gt "$before" ]; then reloaded=1; break; fi
  sleep 0.1
done
if [ "$reloaded" = 1 ]; then pass "a Secret update of the key ring is picked up"; else
  fail "a Secret update of the key ring is picked up"; fi
json_check "a state sealed before the rotation still opens" \
  'code == 200 and r["result"]["content"][0]["text"] == "Hello, Bo!"' "$(retry "$(state_of "$round")" Bo)"
before="$(grep -c 'requestState keys reloaded' "$log" || true)"
kill -HUP "$pid"
reloaded=0
for _ in $(seq 1 50); do
  if [ "$(grep -c 'requestState keys reloaded' "$log" || true)" -gt "$before" ]; then reloaded=1; break; fi
  sleep 0.1
done
if [ "$reloaded" = 1 ] && kill -0 "$pid"; then pass "SIGHUP reloads the keys"; else fail "SIGHUP reloads the keys"; fi

if [ "$admin" = 1 ]; then
  admin_get() { curl -sS --max-time 5 -w ' %{http_code}' "http://127.0.0.1:$admin_port$1" || true; }
  out="$(admin_get /healthz)"
  if [ "${out##* }" = 200 ] && [[ "$out" == ok* ]]; then pass "/healthz answers 200 ok"; else fail "/healthz: $out"; fi
  out="$(admin_get /readyz)"
  if [ "${out##* }" = 200 ]; then pass "/readyz answers 200"; else fail "/readyz: $out"; fi
  out="$(admin_get /metrics)"
  if [ "${out##* }" = 200 ] && grep -q '^mrtr_requests_total{' <<<"$out" \
     && grep -q '^mrtr_redemptions_total{result="ok"} 2' <<<"$out"; then
    pass "/metrics counts requests and redemptions"
  else
    fail "/metrics: $(head -c 400 <<<"$out")"
  fi
  out="$(admin_get /status)"
  json_check "/status reports the demo backend" 'code == 200 and "demo" in r["backends"]' "${out##* } ${out% *}"
  # The image's HEALTHCHECK command, taken from the Dockerfile.
  if python3 - Dockerfile > "$root/tmp/.healthcheck" <<'PY'
import json, re, sys
m = re.search(r'^HEALTHCHECK\b.*?\bCMD (\[.*?\])\s*$', open(sys.argv[1]).read(), re.M | re.S)
print("\0".join(json.loads(m.group(1))), end="")
PY
  then
    mapfile -d '' healthcheck < "$root/tmp/.healthcheck"
    if MRTR_HEALTH_PORT="$admin_port" timeout 5 "${healthcheck[@]}"; then
      pass "the Dockerfile HEALTHCHECK command passes"
    else
      fail "the Dockerfile HEALTHCHECK command passes"
    fi
    if MRTR_HEALTH_PORT="$port" timeout 5 "${healthcheck[@]}" 2>/dev/null; then
      fail "the HEALTHCHECK command fails against a port without /healthz"
    else
      pass "the HEALTHCHECK command fails against a port without /healthz"
    fi
  else
    fail "HEALTHCHECK CMD found in the Dockerfile"
  fi
fi

# ---- SIGTERM with a call still held: drain, abandon, exit 0 ---------------------------------------
round="$(mcp tools/call ask_name "$ASK")"
json_check "a call is held at shutdown" 'r["result"]["resultType"] == "input_required"' "$round"
children="$(pgrep -P "$pid" || true)"
kill -TERM "$pid"
start=$SECONDS
status=0
wait "$pid" || status=$?
pid=""
elapsed=$((SECONDS - start))
if [ "$status" = 0 ]; then pass "SIGTERM: exit status 0 (after ${elapsed}s)"; else
  fail "SIGTERM: exit status $status"; tail -20 "$log"; fi
if [ "$elapsed" -le 15 ]; then pass "the drain ends in time (drain_timeout 3s, then sessions close)"; else fail "the drain took ${elapsed}s"; fi
left=""
for _ in $(seq 1 20); do
  left=""
  for child in $children; do
    if [ -e "/proc/$child" ] && ! grep -q '^State:.*Z' "/proc/$child/status" 2>/dev/null; then
      left="$left $child"
    fi
  done
  [ -z "$left" ] && break
  sleep 0.1
done
if [ -z "$left" ]; then pass "no backend process outlives the gateway"; else fail "backend processes left:$left"; fi
if grep -q '"level":"INFO"' "$log"; then pass "logs are JSON lines"; else fail "logs are JSON lines"; fi

# ---- nothing written outside tmp ------------------------------------------------------------------
chmod -R u+w "$root"
rm -rf "$keys_dir"/..2026_01_01_00_05_00.2 "$keys_dir/..data"
ln -s ..2026_01_01_00_00_00.1 "$keys_dir/..data"
find "$root" -path "$root/tmp" -prune -o -print | sort > "$root/tmp/.after"
if diff "$root/tmp/.before" "$root/tmp/.after" >/dev/null; then
  pass "nothing was written outside tmp"
else
  fail "files written outside tmp: $(diff "$root/tmp/.before" "$root/tmp/.after" | grep '^>' | head -5)"
fi
rm -f "$log"

finish
