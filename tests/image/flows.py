#!/usr/bin/env python3
"""A 2026-07-28 client for the container tests: multi-round flows through the gateway.

A flow calls a tool, answers every `input_required` round (each string asked for gets a value
unique to the flow, every boolean `true`) and retries with the round's `requestState`, until the
call completes; it completes correctly when the final text names every string it answered, so
a flow can never be handed another flow's result.

  flows.py run --url URL --host HOST --token TOKEN --tool TOOL
               [--workers N] [--seconds S] [--until FILE] [--think-ms MS] [--out FILE]
      N workers run flows one after the other for S seconds, or until FILE exists (a flow
      started is always finished), pausing MS between a round and its retry, as a user answering would. Prints
      and writes a JSON summary: flows, completed, failed (with the first errors), and each
      flow's start and end (seconds since the run began). Exit status 1 if any flow failed.

  flows.py owner-gone --start URL --retry URL --host HOST --token TOKEN --tool TOOL -- KILL...
      Starts a flow at --start, runs the command KILL (which stops the owner), then sends the
      round's retry to --retry and prints {status, code, reason, seconds}: what the client got
      and how long it took.

Requests go only to the URLs given (the tests' published loopback ports).
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

PROTOCOL = "2026-07-28"
CAPABILITIES = {"elicitation": {}}


class FlowError(Exception):
    pass


def post(url, host, token, body, timeout=30):
    """POSTs one JSON-RPC request; returns (HTTP status, the JSON-RPC response for its id)."""
    params = body["params"]
    headers = {
        "Host": host,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": body["method"],
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if "name" in params:
        headers["Mcp-Name"] = params["name"]
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, content_type, raw = response.status, response.headers.get(
                "Content-Type", ""), response.read()
    except urllib.error.HTTPError as e:
        status, content_type, raw = e.code, e.headers.get("Content-Type", ""), e.read()
    if content_type.startswith("text/event-stream"):
        return status, last_response(raw.decode(), body["id"])
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, {"unparsed": raw[:200].decode(errors="replace")}


def last_response(stream, request_id):
    """The JSON-RPC response for request_id among an SSE stream's events."""
    answer = None
    for event in stream.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
        if not data:
            continue
        message = json.loads(data)
        if message.get("id") == request_id and ("result" in message or "error" in message):
            answer = message
    return answer or {"unparsed": "no response event in the stream"}


def call_body(request_id, tool, flow, state=None, responses=None):
    params = {"name": tool, "arguments": {},
              "_meta": {"io.modelcontextprotocol/protocolVersion": PROTOCOL,
                        "io.modelcontextprotocol/clientCapabilities": CAPABILITIES}}
    if state is not None:
        params["requestState"] = state
        params["inputResponses"] = responses
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def answers(input_requests, flow, given):
    """An accepting answer to each elicitation, with values unique to this flow."""
    out = {}
    for key, request in input_requests.items():
        if request.get("method") != "elicitation/create":
            raise FlowError(f"unexpected input request {key}: {request.get('method')}")
        schema = request["params"].get("requestedSchema", {})
        content = {}
        for name, prop in schema.get("properties", {}).items():
            if prop.get("type") == "boolean":
                content[name] = True
            else:
                content[name] = f"{name}-{flow}"
                given.append(content[name])
        out[key] = {"action": "accept", "content": content}
    return out


def first_round(url, host, token, tool, flow):
    status, reply = post(url, host, token, call_body(f"f{flow}-0", tool, flow))
    result = reply.get("result") if isinstance(reply, dict) else None
    if status != 200 or not result or result.get("resultType") != "input_required":
        raise FlowError(f"first call: HTTP {status} {json.dumps(reply)[:300]}")
    return result


def run_flow(url, host, token, tool, flow, think):
    began = time.monotonic()
    # What each round asked and when: a failure names the way it went.
    asked = []
    try:
        result = first_round(url, host, token, tool, flow)
        given = []
        for round_number in range(1, 10):
            asked.append((round(time.monotonic() - began, 2), sorted(result.get("inputRequests", {}))))
            time.sleep(think)
            responses = answers(result.get("inputRequests", {}), flow, given)
            body = call_body(f"f{flow}-{round_number}", tool, flow, result["requestState"], responses)
            status, reply = post(url, host, token, body)
            result = reply.get("result") if isinstance(reply, dict) else None
            if status != 200 or not result:
                raise FlowError(f"retry {round_number}: HTTP {status} {json.dumps(reply)[:300]}")
            if result.get("resultType") == "input_required":
                continue
            if result.get("isError"):
                raise FlowError(f"retry {round_number}: tool error {json.dumps(result)[:300]}")
            text = " ".join(c.get("text", "") for c in result.get("content", []))
            missing = [value for value in given if value not in text]
            if missing:
                raise FlowError(f"result {text!r} lacks this flow's answers {missing}")
            return round_number
        raise FlowError("more than 9 rounds")
    except Exception as e:  # noqa: BLE001 - every failure is reported with its rounds
        raise FlowError(f"{e} (rounds asked, seconds into the flow: {asked}; "
                        f"failed at {round(time.monotonic() - began, 2)} s)") from None


def run(args):
    began = time.monotonic()
    deadline = began + args.seconds
    lock = threading.Lock()
    flows, failures = [], []
    counter = iter(range(1_000_000))

    def running():
        return time.monotonic() < deadline and not (args.until and os.path.exists(args.until))

    def worker():
        while running():
            with lock:
                flow = next(counter)
            start = time.monotonic() - began
            try:
                rounds = run_flow(args.url, args.host, args.token, args.tool, flow,
                                  args.think_ms / 1000)
                error = None
            except Exception as e:  # noqa: BLE001 - every failure is reported
                rounds, error = 0, f"flow {flow}: {e}"
            with lock:
                flows.append({"flow": flow, "start": round(start, 3),
                              "end": round(time.monotonic() - began, 3), "rounds": rounds,
                              "ok": error is None})
                if error:
                    failures.append(error)

    threads = [threading.Thread(target=worker) for _ in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary = {"flows": len(flows), "completed": sum(f["ok"] for f in flows),
               "failed": len(failures), "errors": failures[:10],
               "rounds": sorted({f["rounds"] for f in flows if f["ok"]}),
               "timeline": sorted(flows, key=lambda f: f["flow"])}
    if args.out:
        with open(args.out, "w") as out:
            json.dump(summary, out)
    print(json.dumps({k: v for k, v in summary.items() if k != "timeline"}))
    return 0 if summary["failed"] == 0 and summary["flows"] > 0 else 1


def owner_gone(args):
    result = first_round(args.start, args.host, args.token, args.tool, 0)
    subprocess.run(args.kill, check=True, stdout=subprocess.DEVNULL)
    given = []
    body = call_body("f0-1", args.tool, 0, result["requestState"],
                     answers(result.get("inputRequests", {}), 0, given))
    began = time.monotonic()
    status, reply = post(args.retry, args.host, args.token, body)
    seconds = time.monotonic() - began
    error = reply.get("error", {}) if isinstance(reply, dict) else {}
    print(json.dumps({"status": status, "code": error.get("code"),
                      "reason": (error.get("data") or {}).get("reason"),
                      "message": error.get("message"), "seconds": round(seconds, 3)}))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--url", required=True)
    r.add_argument("--workers", type=int, default=4)
    r.add_argument("--seconds", type=float, default=5)
    r.add_argument("--until")
    r.add_argument("--think-ms", type=float, default=0)
    r.add_argument("--out")
    o = sub.add_parser("owner-gone")
    o.add_argument("--start", required=True)
    o.add_argument("--retry", required=True)
    o.add_argument("kill", nargs="+")
    for p in (r, o):
        p.add_argument("--host", required=True)
        p.add_argument("--token", default="", help="a bearer token (none: no Authorization)")
        p.add_argument("--tool", required=True)
    args = parser.parse_args()
    sys.exit(run(args) if args.command == "run" else owner_gone(args))


if __name__ == "__main__":
    main()
