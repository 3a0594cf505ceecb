# What the image tests check with (sourced): the pass/fail tally, with one line per check and
# the closing "N passed, N failed" line, and a 2026-07-28 request sent with curl.

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
finish() { # the closing line; its exit status
  echo
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
}

json_check() { # LABEL PYTHON-EXPR "CODE BODY": EXPR over r (the parsed body) and code
  local code="${3%% *}" body="${3#* }"
  if CODE="$code" BODY="$body" python3 -c '
import json, os, sys
code = int(os.environ["CODE"]); r = json.loads(os.environ["BODY"])
sys.exit(0 if ('"$2"') else 1)' 2>/dev/null; then pass "$1"; else fail "$1: ${3:0:400}"; fi
}

mcp_post() { # URL METHOD MCP-NAME BODY [CURL-ARGS...] -> "HTTP_CODE BODY" (MCP-NAME may be "")
  local url="$1" method="$2" name="$3" body="$4" out code
  shift 4
  local headers=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'
                 -H 'MCP-Protocol-Version: 2026-07-28' -H "Mcp-Method: $method")
  [ -n "$name" ] && headers+=(-H "Mcp-Name: $name")
  out="$(mktemp "${scratch:-${TMPDIR:-/tmp}}/mcp-body.XXXXXX")"
  code="$(curl -sS --max-time 60 -o "$out" -w '%{http_code}' "${headers[@]}" "$@" "$url" -d "$body" || true)"
  echo "$code $(cat "$out")"
  rm -f "$out"
}
