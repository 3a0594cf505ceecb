#!/usr/bin/env bash
# The image as an operator runs it: built from the Dockerfile, started as its header says
# (--read-only --tmpfs /tmp, ports published on 127.0.0.1 only) with the configuration baked in
# (the built-in demo backend over stdio at /mcp), and checked from outside:
#   - its size is the base image's plus the binary and little else;
#   - it runs as uid 10001 on a root filesystem only /tmp of which is writable; its HEALTHCHECK
#     passes;
#   - /readyz and /metrics answer, a plain call and an elicitation round complete through the
#     published port, and the stdio backend runs inside the container;
#   - SIGTERM: for the shutdown delay /readyz says "stopping" and a new call is still served;
#     then the published port refuses new connections; a running call that ends within the drain
#     gets its result, one that outlasts it gets the shutdown error as the last event of its
#     stream, the exit status is 0 and the stop ends within the delay plus the drain timeout.
#
# Usage: tests/image/container.sh   (see lib.sh for CONTAINER_ENGINE and MRTR_IMAGE)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

engine_setup
image_build

# ---- the image ---------------------------------------------------------------------------------
inspect() { "$ENGINE" image inspect --format "$1" "$2"; }
image_bytes="$(inspect '{{.Size}}' "$IMAGE")"
base=docker.io/library/debian:bookworm-slim
# docker's BuildKit keeps the bases it pulls out of the image store: fetch it for the comparison.
"$ENGINE" image inspect "$base" >/dev/null 2>&1 || "$ENGINE" pull -q "$base" >/dev/null 2>&1 || true
base_bytes="$(inspect '{{.Size}}' "$base" 2>/dev/null || echo 0)"
binary_bytes="$("$ENGINE" run --rm --entrypoint /usr/bin/stat "$IMAGE" -c %s /usr/local/bin/mrtr-gateway)"
extra=$((image_bytes - base_bytes - binary_bytes))
mib() { echo "$(( ($1 + 524288) / 1048576 )) MiB"; }
echo "image $(mib "$image_bytes") = base $(mib "$base_bytes") + binary $(mib "$binary_bytes") + $(mib "$extra")"
if [ "$base_bytes" = 0 ]; then
  fail "the base image $base is not in the image store: the size cannot be compared"
elif [ "$extra" -le $((16 * 1048576)) ]; then
  pass "the image is the base plus the binary and at most 16 MiB more ($(mib "$extra"))"
else
  fail "the image adds $(mib "$extra") to the base and the binary"
fi
if [ "$(inspect '{{.Config.User}}' "$IMAGE")" = 10001:10001 ]; then pass "the image's user is 10001:10001"; else
  fail "the image's user: $(inspect '{{.Config.User}}' "$IMAGE")"; fi
if inspect '{{json .Config.Healthcheck}}' "$IMAGE" | grep -q '/healthz'; then
  pass "the image keeps its HEALTHCHECK"
else
  fail "the image has no HEALTHCHECK: $(inspect '{{json .Config.Healthcheck}}' "$IMAGE")"
fi

# ---- started as the Dockerfile's header says ---------------------------------------------------
name="mrtr-image-test-$$"
run_container "$name" "${read_only[@]}" --tmpfs /tmp -p 127.0.0.1::8080 -p 127.0.0.1::9090 "$IMAGE"
port="$(host_port "$name" 8080)"
admin="$(host_port "$name" 9090)"
echo "container $name: MCP on 127.0.0.1:$port, admin on 127.0.0.1:$admin"
if wait_http "http://127.0.0.1:$admin/readyz" 60; then pass "/readyz answers 200"; else
  fail "/readyz never answered 200"; "$ENGINE" logs "$name" 2>&1 | tail -20; finish; exit 1; fi

in_container() { "$ENGINE" exec "$name" /bin/bash -c "$1"; }
if in_container 'grep -Eq "^Uid:\s+10001\s" /proc/1/status'; then pass "the gateway runs as uid 10001"; else
  fail "the gateway's uid: $(in_container 'grep ^Uid: /proc/1/status')"; fi

healthy=0
if [ "$ENGINE" = podman ]; then
  # podman runs health checks from systemd timers, which a CI machine may lack: run it once.
  podman healthcheck run "$name" >/dev/null && healthy=1
else
  for _ in $(seq 1 90); do
    [ "$(docker inspect --format '{{.State.Health.Status}}' "$name")" = healthy ] && { healthy=1; break; }
    sleep 1
  done
fi
if [ "$healthy" = 1 ]; then pass "the HEALTHCHECK passes"; else fail "the HEALTHCHECK fails"; fi

metrics="$(curl -sS --max-time 5 "http://127.0.0.1:$admin/metrics" || true)"
if grep -q '^mrtr_held_calls' <<<"$metrics"; then pass "/metrics answers"; else
  fail "/metrics: ${metrics:0:300}"; fi

mcp() { mcp_post "http://127.0.0.1:$port/mcp" "$@"; } # METHOD MCP-NAME BODY
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
call() { # ID TOOL ARGUMENTS-JSON
  echo '{"jsonrpc":"2.0","id":'"$1"',"method":"tools/call","params":{"name":"'"$2"'","arguments":'"$3"','"$META"'}}'
}

json_check "a plain call reaches the stdio demo backend through the published port" \
  'code == 200 and r["result"]["content"][0]["text"] == "hello"' \
  "$(mcp tools/call echo "$(call 1 echo '{"text":"hello"}')")"

if out="$(python3 "$IMAGE_TESTS/flows.py" run --url "http://127.0.0.1:$port/mcp" \
            --host "127.0.0.1:$port" --tool ask_name --workers 2 --seconds 0.5)"; then
  pass "elicitation rounds (ask_name) complete through the published port: $out"
else
  fail "elicitation rounds (ask_name): $out"
fi

backend="$(in_container 'for p in /proc/[0-9]*; do
  [ "$p" = /proc/1 ] && continue
  cmd="$(tr "\0" " " < "$p/cmdline" 2>/dev/null)" || continue
  case "$cmd" in *demo-backend*) echo "$(grep ^PPid: "$p/status" | cut -f2) $(grep ^Uid: "$p/status" | cut -f2) $cmd";; esac
done')"
if grep -Eq '^1 10001 /usr/local/bin/mrtr-gateway demo-backend' <<<"$backend"; then
  pass "the stdio backend runs inside the container, a child of the gateway, as uid 10001"
else
  fail "the stdio backend in the container: ${backend:-none}"
fi

# As root, so that only the filesystem can say no: every path but /tmp is read-only.
probe="$("$ENGINE" exec --user 0 "$name" /bin/bash -c '
  for p in /probe /etc/probe /var/tmp/probe /run/probe /tmp/probe; do
    if touch "$p" 2>/dev/null; then echo "$p:writable"; rm -f "$p"; else echo "$p:refused"; fi
  done' | tr '\n' ' ')"
if [ "$probe" = "/probe:refused /etc/probe:refused /var/tmp/probe:refused /run/probe:refused /tmp/probe:writable " ]; then
  pass "the root filesystem is read-only, /tmp writable"
else
  fail "writable paths: $probe"
fi

# ---- SIGTERM ------------------------------------------------------------------------------------
drain_s=20 # the default server.drain_timeout, which the image's configuration keeps
delay_s=5  # the default server.shutdown_delay, likewise
start_background mcp tools/call countdown "$(call 10 countdown '{"from":3,"delay_ms":1000}')" > "$scratch/short"
short_pid=$BACKGROUND_PID
start_background mcp tools/call countdown "$(call 11 countdown '{"from":100,"delay_ms":1000}')" > "$scratch/long"
long_pid=$BACKGROUND_PID
sleep 1
"$ENGINE" kill --signal TERM "$name" >/dev/null
stopping=$SECONDS
sleep 0.5
readyz="$(curl -s -w ' %{http_code}' --max-time 5 "http://127.0.0.1:$admin/readyz" || true)"
if [ "$readyz" = "stopping
 503" ]; then pass "after SIGTERM /readyz answers 503 stopping"; else
  fail "after SIGTERM /readyz answered: $readyz"; fi
json_check "in the shutdown delay a new call is still served" \
  'code == 200 and r["result"]["content"][0]["text"] == "in time"' \
  "$(mcp tools/call echo "$(call 12 echo '{"text":"in time"}')")"
sleep "$delay_s"
refused="$(curl -s -o /dev/null -w '%{http_code} %{exitcode}' --max-time 5 "http://127.0.0.1:$port/mcp" || true)"
if [ "$refused" = "000 7" ]; then pass "after the shutdown delay the published port refuses new connections"; else
  fail "after the shutdown delay a new connection got: $refused (expected refused: 000 7)"; fi
status="$(exit_code_after "$name" $((delay_s + drain_s + 30)))"
elapsed=$((SECONDS - stopping))
if [ "$status" = 0 ]; then pass "SIGTERM: exit code 0 after ${elapsed} s"; else
  fail "SIGTERM: exit code ${status:-unknown}"; "$ENGINE" logs "$name" 2>&1 | tail -20; fi
if [ "$elapsed" -le $((delay_s + drain_s + 6)) ]; then
  pass "the stop ended within the delay and the drain timeout (${elapsed} s; ${delay_s} + ${drain_s} s, then sessions close)"
else
  fail "stopping took ${elapsed} s (shutdown_delay ${delay_s} s + drain_timeout ${drain_s} s)"
fi
wait_background "$short_pid"
wait_background "$long_pid"
json_check "a call that ends within the drain gets its result" \
  'code == 200 and r["result"]["content"][0]["text"] == "Liftoff!"' "$(cat "$scratch/short")"
last_event="$(python3 - "$scratch/long" <<'PY'
import json, sys
text = open(sys.argv[1]).read().split(" ", 1)[1]
events = [e for e in text.replace("\r\n", "\n").split("\n\n") if "data:" in e]
data = "".join(l[5:].strip() for l in events[-1].split("\n") if l.startswith("data:"))
print(json.dumps(json.loads(data)))
PY
)" || last_event="{}"
json_check "a call that outlasts the drain ends with the shutdown error as its stream's last event" \
  'code == 200 and r["id"] == 11 and r["error"]["code"] == -32603 and "shut down" in r["error"]["message"]' \
  "$(head -c 3 "$scratch/long") $last_event"

finish
