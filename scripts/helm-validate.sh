#!/usr/bin/env bash
# Checks the Helm chart without a cluster:
#   1. values.yaml, and each helm/examples/values/*.yaml merged over it, validate against
#      values.schema.json (python jsonschema); values the schema must refuse are refused, and
#      values at its limits are accepted;
#   2. the chart lints and renders with Helm's own engine, and each rendering equals the committed
#      manifests in helm/examples/ (default.yaml for the chart's defaults, NAME.yaml for
#      helm/examples/values/NAME.yaml); values the chart's render-time checks must refuse are
#      refused, and values next to their limits are accepted;
#   3. every manifest in helm/examples/*.yaml validates with kubernetes-validate (strict, oldest and
#      newest supported Kubernetes), except the custom resources listed in CUSTOM_KINDS, which it
#      has no schema for and which are checked structurally instead (any other kind it does not
#      know fails); and the objects refer to each other consistently; the Grafana dashboard is
#      valid JSON, and every expression of the rules and the dashboard parses as PromQL and
#      queries only metrics that docs/operations.md lists;
#   4. each rendered gateway configuration is valid TOML, reads back as the values' config (its
#      tables, routes with their auth and policy, and the backends they name), and, when a
#      mrtr-gateway binary is at hand (MRTR_GATEWAY_BIN, else target/release/mrtr-gateway), passes
#      `mrtr-gateway check-config`.
# Exits non-zero on any failure.
#
# Usage: scripts/helm-validate.sh            check
#        scripts/helm-validate.sh --update   rewrite helm/examples/*.yaml from the chart, then check
#        scripts/helm-validate.sh --render NAME FILE
#                                            render the chart with helm/examples/values/NAME.yaml
#                                            ("default": values.yaml alone) into FILE, after the
#                                            values' schema checks, whose failures it does not
#                                            count (the container fleet test runs the rendering)
#
# Helm's engine: the `helm` command when it is on PATH, otherwise the PyPI package
# helm-python-sdk (Helm's Go SDK as a library). Python packages go into a virtual environment in
# a temporary directory (or in HELM_VALIDATE_VENV, kept between runs, when set).
set -euo pipefail
cd "$(dirname "$0")/.."

update=0
render_name=""
render_out=""
case "${1:-}" in
  "") ;;
  --update) update=1 ;;
  --render)
    [ $# = 3 ] || { echo "usage: $0 --render NAME FILE" >&2; exit 2; }
    render_name="$2"
    render_out="$(realpath -m "$3")"
    ;;
  *) echo "usage: $0 [--update | --render NAME FILE]" >&2; exit 2 ;;
esac

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

venv="${HELM_VALIDATE_VENV:-$tmp/venv}"
requirements=(
  jsonschema==4.26.0
  PyYAML==6.0.3
  kubernetes-validate==1.37.0
  tomli==2.2.1
  promql-parser==0.11.0
)
if ! command -v helm >/dev/null 2>&1; then
  requirements+=(helm-python-sdk==0.2.2)
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
echo "== installing ${requirements[*]}"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"

bin="${MRTR_GATEWAY_BIN:-target/release/mrtr-gateway}"
[ -x "$bin" ] || bin=""

"$venv/bin/python" - "$update" "$tmp" "$bin" "$render_name" "$render_out" <<'PY'
import base64
import copy
import difflib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import promql_parser
import tomli
import yaml

UPDATE = sys.argv[1] == "1"
TMP = Path(sys.argv[2])
BIN = sys.argv[3]
RENDER_NAME, RENDER_OUT = sys.argv[4], sys.argv[5]
CHART = Path("helm/mrtr-gateway")
EXAMPLES = Path("helm/examples")
RELEASE, NAMESPACE = "mrtr-gateway", "mcp"
KUBE_VERSIONS = ["1.25.0", "1.37.0"]
# Kinds the Kubernetes schemas do not cover (custom resources of the Prometheus Operator): not
# given to kubernetes-validate, checked structurally below instead.
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
DASHBOARD = CHART / "dashboards" / "mrtr-gateway.json"
# Units of the gateway's durations (humantime), in seconds.
DURATION_UNITS = {
    **dict.fromkeys(("nanos", "nsec", "ns"), 1e-9),
    **dict.fromkeys(("usec", "us", "µs"), 1e-6),
    **dict.fromkeys(("millis", "msec", "ms"), 1e-3),
    **dict.fromkeys(("seconds", "second", "secs", "sec", "s"), 1),
    **dict.fromkeys(("minutes", "minute", "min", "mins", "m"), 60),
    **dict.fromkeys(("hours", "hour", "hr", "hrs", "h"), 3600),
    **dict.fromkeys(("days", "day", "d"), 86400),
    **dict.fromkeys(("weeks", "week", "wk", "wks", "w"), 604800),
    **dict.fromkeys(("months", "month", "M"), 2630016),
    **dict.fromkeys(("years", "year", "yr", "yrs", "y"), 31557600),
}
# The generated key ring differs at every rendering: the committed examples carry this
# placeholder instead (a comment line, so applying an example as is yields no usable key).
KEY_PLACEHOLDER = base64.b64encode(
    b"# generated at install: one random key (see keyRing in the chart README)\n"
).decode()

failures = []


def seconds(duration):
    """A duration as the gateway reads it ("50s", "2m", "1h 30m"), in seconds."""
    parts = re.findall(r"([0-9]+) *([a-zA-Zµ]+)", duration)
    if not parts or re.sub(r"[0-9]+ *[a-zA-Zµ]+| ", "", duration):
        raise ValueError(f"not a duration: {duration!r}")
    return sum(int(n) * DURATION_UNITS[unit] for n, unit in parts)


def fail(message):
    failures.append(message)
    print("FAIL", message)


def ok(message):
    print("ok  ", message)


def coalesce(defaults, overrides):
    """Helm's merge of user values over chart defaults: maps merge, null deletes, rest replaces."""
    out = copy.deepcopy(defaults)
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = coalesce(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# ---- 1. values against the schema ---------------------------------------------------------------
schema = json.loads((CHART / "values.schema.json").read_text())
jsonschema.Draft7Validator.check_schema(schema)
validator = jsonschema.Draft7Validator(schema)
defaults = yaml.safe_load((CHART / "values.yaml").read_text())
cases = [("default", {}, None)]
for path in sorted((EXAMPLES / "values").glob("*.yaml")):
    cases.append((path.stem, yaml.safe_load(path.read_text()) or {}, path))

merged_config = {}  # example name: the config the values give, to compare with the rendering
for name, overrides, path in cases:
    label = "values.yaml" if path is None else f"{path} over values.yaml"
    merged_config[name] = coalesce(defaults, overrides).get("config", {})
    errors = sorted(validator.iter_errors(coalesce(defaults, overrides)), key=lambda e: list(e.path))
    if errors:
        for e in errors:
            fail(f"{label}: {'.'.join(map(str, e.path)) or '(root)'}: {e.message}")
    else:
        ok(f"{label} validates against values.schema.json")

def with_route(**keys):
    """Values with one route to the demo backend, without auth unless given, plus keys."""
    return {"config": {"route": [{"path": "/mcp", "backend": "demo", "auth": {"mode": "none"}, **keys}]}}


def http_backend(**keys):
    """Values with a route to an HTTP backend, plus keys of that backend."""
    return {"config": {
        "route": [{"path": "/mcp", "backend": "web", "auth": {
            "mode": "bearer", "tokens": [{"principal": "p", "token": "${TOKEN}"}]}}],
        "backend": {"web": {"transport": "http", "url": "https://mcp.example.internal/mcp", **keys}}}}


refused = {
    "a key the chart sets (config.server.listen)": {"config": {"server": {"listen": "0.0.0.0:1"}}},
    "an unknown key (config.backend.demo.pool.max_session)": {
        "config": {"backend": {"demo": {"pool": {"max_session": 3}}}}},
    "a bearer token written in clear": {"config": {"route": [{
        "path": "/mcp", "backend": "demo",
        "auth": {"mode": "bearer", "tokens": [{"principal": "p", "token": "s3cret"}]}}]}},
    "a route without auth": {"config": {"route": [{"path": "/mcp", "backend": "demo"}]}},
    "a route with both backend and backends": with_route(backends=["demo"]),
    "a route with neither backend nor backends": {"config": {"route": [
        {"path": "/mcp", "auth": {"mode": "none"}}]}},
    "a prefix with a space": {"config": {"route": [{
        "path": "/mcp", "backends": ["demo"], "auth": {"mode": "none"}, "prefixes": {"demo": "my demo"}}]}},
    "an on_backend_error the gateway does not know": {"config": {"route": [{
        "path": "/mcp", "backends": ["demo"], "auth": {"mode": "none"}, "on_backend_error": "retry"}]}},
    "a stdio backend with a url": {"config": {"backend": {"demo": {"url": "http://x"}}}},
    "a typo at the top level (replicas)": {"replicas": 2},
    "a key the chart sets (config.server.shutdown_delay)": {"config": {"server": {"shutdown_delay": "1s"}}},
    "a key the chart sets (config.fleet)": {"config": {"fleet": {"advertise": "10.0.0.1:8080"}}},
    "a key the chart sets (config.fleet.listen)": {"config": {"fleet": {"listen": "0.0.0.0:8081"}}},
    "a shutdownDelaySeconds above 300 (301)": {"shutdownDelaySeconds": 301},
    "a ports.peer of 0": {"ports": {"peer": 0}},
    "a fleet.peerTimeout that is no duration": {"fleet": {"peerTimeout": "2"}},
    "a fleet.allowedPeers entry that is no CIDR": {"fleet": {"allowedPeers": ["10.0.0.0"]}},
    "an unknown key (prometheusRule.labels)": {"prometheusRule": {"labels": {"a": "b"}}},
    "prometheusRule.matchers with braces": {"prometheusRule": {"matchers": '{job="x"}'}},
    "a grafanaDashboard.labelValue that is no label value": {"grafanaDashboard": {"labelValue": "a b"}},
    "a policy effect other than allow or deny (permit)": with_route(
        policy=[{"tools": ["*"], "effect": "permit"}]),
    "a policy rule that selects nothing (when alone)": with_route(policy=[{"when": "true"}]),
    "a policy rule with only empty globs": with_route(policy=[{"tools": [], "prompts": []}]),
    "scopes on a policy rule with effect deny": with_route(
        policy=[{"tools": ["*"], "scopes": ["x"], "effect": "deny"}]),
    "an unknown key in a policy rule (effects)": with_route(
        policy=[{"tools": ["*"], "effects": "deny"}]),
    "an eras entry that is no protocol revision (2025-06-18)": with_route(eras=["2025-06-18"]),
    "an empty eras": with_route(eras=[]),
    "a route auth.scopes entry with a space": with_route(
        auth={"mode": "jwt", "issuer": "i", "audience": "a", "jwks_file": "/j", "scopes": ["a b"]}),
    "an audit.queue of 0": {"config": {"audit": {"file": "-", "queue": 0}}},
    "an audit.queue above 1000000": {"config": {"audit": {"file": "-", "queue": 1000001}}},
    "an audit without file": {"config": {"audit": {"arguments": True}}},
    "an unknown key under audit (path)": {"config": {"audit": {"file": "-", "path": "/x"}}},
    "a legacy.max_sessions of 0": {"config": {"legacy": {"max_sessions": 0}}},
    "an unknown key under legacy (max_session)": {"config": {"legacy": {"max_session": 3}}},
    "an unknown key under token_exchange (scope)": http_backend(token_exchange={
        "endpoint": "https://login.example.com/token", "client_id": "g",
        "client_secret": "${EXCHANGE_SECRET}", "scope": ["x"]}),
    "a token_exchange client_secret written in clear": http_backend(token_exchange={
        "endpoint": "https://login.example.com/token", "client_id": "g", "client_secret": "s3cret"}),
    "a token_exchange without client_id": http_backend(token_exchange={
        "endpoint": "https://login.example.com/token", "client_secret": "${EXCHANGE_SECRET}"}),
    "token_exchange on a stdio backend": {"config": {"backend": {"demo": {"token_exchange": {
        "endpoint": "https://login.example.com/token", "client_id": "g",
        "client_secret": "${EXCHANGE_SECRET}"}}}}},
    "identity_headers on a stdio backend": {"config": {"backend": {"demo": {
        "identity_headers": {"X-User": "claims.sub"}}}}},
    "identity_env on an http backend": http_backend(identity_env={"MCP_USER": "claims.sub"}),
    "an identity_headers name that is no header name": http_backend(
        identity_headers={"X User": "claims.sub"}),
}
for what, overrides in refused.items():
    if validator.is_valid(coalesce(defaults, overrides)):
        fail(f"values.schema.json accepts {what}")
    else:
        ok(f"values.schema.json refuses {what}")

# Values at the limits, and what the gateway takes as written, accepted.
accepted = {
    "an audit.queue of 1": {"config": {"audit": {"file": "-", "queue": 1}}},
    "an audit.queue of 1000000": {"config": {"audit": {"file": "/var/log/mcp/audit.jsonl", "queue": 1000000}}},
    "a legacy table with each limit at 1": {"config": {"legacy": {
        "max_sessions": 1, "max_sessions_per_principal": 1, "replay_events": 1}}},
    "a policy rule with effect deny and no scopes": with_route(
        policy=[{"resources": ["secret://*"], "effect": "deny"}]),
    "a route serving 2025-11-25 clients only": with_route(eras=["2025-11-25"]),
}
for what, overrides in accepted.items():
    errors = list(validator.iter_errors(coalesce(defaults, overrides)))
    if errors:
        fail(f"values.schema.json refuses {what}: {errors[0].message}")
    else:
        ok(f"values.schema.json accepts {what}")

# ---- 2. lint, render, compare with the committed examples ----------------------------------------
INSTALL_ORDER = [
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
    "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
    "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
    "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
    "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
]
SEPARATOR = re.compile(r"(?:^|\s*\n)---\s*")


def stream(files):
    """What `helm template` prints for rendered template files (Helm's manifest sorter)."""
    manifests = []
    for name in sorted(files):
        base = os.path.basename(name)
        if base.startswith("_") or base == "NOTES.txt" or not files[name].strip():
            continue
        for doc in SEPARATOR.split(files[name].lstrip()):
            if doc:
                manifests.append((name, doc.lstrip(), (yaml.safe_load(doc) or {}).get("kind", "")))
    order = {kind: i for i, kind in enumerate(INSTALL_ORDER)}

    def key(m):
        kind = m[2]
        return (0, order[kind], "") if kind in order else (1, 0, kind)

    manifests.sort(key=key)  # stable, like Helm's sort.SliceStable
    return "".join(f"---\n# Source: {name}\n{doc}\n" for name, doc, _ in manifests)


def normalize(text):
    """Each document without trailing blank lines (Helm 3 trims them, Helm 4 keeps them), and the
    generated key ring replaced by the placeholder."""
    chunks = re.split(r"(?m)^---\n", text)
    if not text.startswith("---\n"):
        chunks = chunks[1:]  # a header before the first document
    docs = [d.rstrip() for d in chunks if d.strip()]
    out = []
    for doc in docs:
        if re.search(r"(?m)^kind: Secret$", doc) and "/templates/secret.yaml" in doc:
            doc = re.sub(r'(?m)^(  keys: )"[A-Za-z0-9+/=]*"$', rf'\1"{KEY_PLACEHOLDER}"', doc)
        out.append("---\n" + doc + "\n")
    return "".join(out)


helm_cli = shutil.which("helm")
if helm_cli:
    print(f"== Helm engine: {subprocess.run([helm_cli, 'version', '--short'], capture_output=True, text=True).stdout.strip()}")
else:
    import helm_python

    print(f"== Helm engine: helm-python-sdk (Helm SDK {helm_python.helm_sdk_version()})")


def render(overrides, path):
    if helm_cli:
        args = [helm_cli, "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        if path is None and overrides:
            path = TMP / "overrides.yaml"
            path.write_text(yaml.safe_dump(overrides))
        if path is not None:
            args += ["-f", str(path)]
        run = subprocess.run(args, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(run.stderr.strip())
        return run.stdout
    with helm_python.Chart.load(str(CHART)) as chart:
        chart.validate_schema(overrides)
        return stream(chart.render(overrides, name=RELEASE, namespace=NAMESPACE))


def lint(overrides, path):
    if helm_cli:
        args = [helm_cli, "lint", "--strict", str(CHART), "--namespace", NAMESPACE]
        if path is not None:
            args += ["-f", str(path)]
        run = subprocess.run(args, capture_output=True, text=True)
        return [] if run.returncode == 0 else [run.stdout.strip() + run.stderr.strip()]
    report = helm_python.lint(str(CHART), overrides, strict=True, namespace=NAMESPACE)
    problems = [f"[{m['severity']}] {m['path']}: {m['error']}" for m in report.get("messages", [])
                if m.get("severity", 0) >= 2]
    return problems + list(report.get("errors") or [])


if RENDER_NAME:
    for name, overrides, path in cases:
        if name == RENDER_NAME:
            Path(RENDER_OUT).write_text(render(overrides, path))
            print(f"rendered the chart with {path or 'values.yaml'} into {RENDER_OUT}")
            sys.exit(0)
    sys.exit(f"no example values named {RENDER_NAME!r}")


rendered = {}
for name, overrides, path in cases:
    label = "defaults" if path is None else str(path)
    problems = lint(overrides, path)
    if problems:
        for p in problems:
            fail(f"helm lint ({label}): {p}")
    else:
        ok(f"helm lint --strict ({label})")
    try:
        text = normalize(render(overrides, path))
    except Exception as e:  # noqa: BLE001 - report any engine failure
        fail(f"render ({label}): {e}")
        continue
    target = EXAMPLES / f"{name}.yaml"
    header = ("# Rendered by scripts/helm-validate.sh --update; do not edit. Equivalent to:\n"
              f"#   helm template {RELEASE} {CHART} --namespace {NAMESPACE}"
              + ("" if path is None else f" -f {path}") + "\n"
              "# (the generated key ring Secret carries a placeholder).\n")
    rendered[name] = text
    if UPDATE:
        target.write_text(header + text)
        ok(f"wrote {target}")
    elif not target.exists():
        fail(f"{target} is missing: run scripts/helm-validate.sh --update")
    elif normalize(target.read_text()) != text:
        diff = difflib.unified_diff(normalize(target.read_text()).splitlines(), text.splitlines(),
                                    str(target), "rendering", lineterm="", n=1)
        print("\n".join(list(diff)[:40]))
        fail(f"{target} differs from the chart's rendering: run scripts/helm-validate.sh --update")
    else:
        ok(f"{target} equals the chart's rendering")
for stale in sorted(set(p.stem for p in EXAMPLES.glob("*.yaml")) - {n for n, _, _ in cases}):
    fail(f"{EXAMPLES / (stale + '.yaml')} has no values file in {EXAMPLES / 'values'}")

# The render-time checks (the chart's validate helper): refused with their message, and values
# next to the limit accepted. The default grace period is 90 s; preStop 0 s + shutdown delay 5 s
# + drain 20 s.
NO_RING = {"keyRing": {"create": False}}
GRACE = "must be greater than preStopSleepSeconds + shutdownDelaySeconds"
render_refused = {
    "fleet without a key ring": (NO_RING, "fleet.enabled needs a key ring"),
    "env POD_IP set by hand with fleet": (
        {"env": [{"name": "POD_IP", "value": "10.0.0.1"}]}, "POD_IP is set by the chart"),
    "a ports.peer equal to ports.mcp with fleet": ({"ports": {"peer": 8080}}, "ports.peer (8080) must differ"),
    "a grace period of preStop + shutdown delay + drain + held_ttl": (
        {"terminationGracePeriodSeconds": 75}, GRACE),
    "a grace period below a held_ttl of 2m": ({"config": {"mrtr": {"held_ttl": "2m"}}}, GRACE),
    "a grace period of exactly preStop + shutdown delay + drain + 1m 5s": (
        {"config": {"mrtr": {"held_ttl": "1m 5s"}}}, GRACE),
    "a grace period of exactly preStop 10s + shutdown delay 30s + drain + held_ttl": (
        {"preStopSleepSeconds": 10, "shutdownDelaySeconds": 30, "terminationGracePeriodSeconds": 110},
        GRACE),
    "a fleet.peerTimeout above 60s": ({"fleet": {"peerTimeout": "61s"}}, "must be between 100ms and 60s"),
    "a fleet.peerTimeout below 100ms": ({"fleet": {"peerTimeout": "99ms"}}, "must be between 100ms and 60s"),
    "a route naming no backend": (
        {"config": {"route": [{"path": "/x", "backend": "nope", "auth": {"mode": "none"}}]}},
        "no config.backend.nope"),
    "a route over several backends, one of them undefined": (
        {"config": {"route": [{"path": "/x", "backends": ["demo", "nope"], "auth": {"mode": "none"}}]}},
        "config.route[0].backends: no config.backend.nope"),
    "a route without auth to a backend with token_exchange": (
        {"config": {
            "route": [{"path": "/x", "backend": "web", "auth": {"mode": "none"}}],
            "backend": {"web": {"transport": "http", "url": "https://mcp.example.internal/mcp",
                                "token_exchange": {"endpoint": "https://login.example.com/token",
                                                   "client_id": "g", "client_secret": "${S}"}}}}},
        "the route must take JWTs"),
    "a route with static tokens to a backend with token_exchange": (
        {"config": {
            "route": [{"path": "/x", "backend": "web",
                       "auth": {"mode": "bearer", "tokens": [{"principal": "ci", "token": "${CI_TOKEN}"}]}}],
            "backend": {"web": {"transport": "http", "url": "https://mcp.example.internal/mcp",
                                "token_exchange": {"endpoint": "https://login.example.com/token",
                                                   "client_id": "g", "client_secret": "${S}"}}}}},
        "the route must take JWTs"),
    "policy scopes on a route without auth": (
        {"config": {"route": [{"path": "/x", "backend": "demo", "auth": {"mode": "none"},
                               "policy": [{"tools": ["*"], "scopes": ["mcp"]}]}]}},
        "an anonymous caller has no scopes"),
}
render_accepted = {
    "a grace period one second above preStop + shutdown delay + drain + 1m 5s": {
        "config": {"mrtr": {"held_ttl": "1m 5s"}}, "terminationGracePeriodSeconds": 91},
    "a grace period one second above preStop 10s + shutdown delay 30s + drain + held_ttl": {
        "preStopSleepSeconds": 10, "shutdownDelaySeconds": 30, "terminationGracePeriodSeconds": 111},
    "a shutdownDelaySeconds of 0": {"shutdownDelaySeconds": 0},
    "a shutdownDelaySeconds of 300 with a grace period of 371 s": {
        "shutdownDelaySeconds": 300, "terminationGracePeriodSeconds": 371},
    "a ports.peer equal to ports.mcp without fleet": {**NO_RING, "fleet": {"enabled": False},
                                                      "ports": {"peer": 8080}},
    "a held_ttl in milliseconds (64999ms) with a grace period of 90 s": {
        "config": {"mrtr": {"held_ttl": "64999ms"}}},
    "fleet with config.mrtr.keys as its only key ring": {
        **NO_RING, "config": {"mrtr": {"keys": ["${MRTR_KEY}"]}},
        "env": [{"name": "MRTR_KEY", "valueFrom": {"secretKeyRef": {"name": "k", "key": "k"}}}]},
    "no key ring with fleet disabled": {**NO_RING, "fleet": {"enabled": False}},
    "a fleet.peerTimeout of 1m": {"fleet": {"peerTimeout": "1m"}},
}
for what, (overrides, message) in render_refused.items():
    try:
        render(overrides, None)
    except Exception as e:  # noqa: BLE001 - the engine's failure carries the message
        if message in str(e):
            ok(f"the chart refuses {what}")
        else:
            fail(f"the chart refuses {what}, but not with {message!r}: {e}")
    else:
        fail(f"the chart renders {what}")
for what, overrides in render_accepted.items():
    try:
        render(overrides, None)
    except Exception as e:  # noqa: BLE001
        fail(f"the chart refuses {what}: {e}")
    else:
        ok(f"the chart renders {what}")

# Metrics the operations guide lists (its metrics table): the only ones rules and dashboard may use.
guide = Path("docs/operations.md").read_text()
METRICS = set()
for line in guide.splitlines():
    if line.startswith("| `mrtr_"):
        METRICS.update(re.findall(r"`(mrtr_[a-z_]+)`", line.split("|")[1]))


def promql_error(expr):
    """Why expr is not PromQL (Grafana's $__rate_interval read as 5m), or None."""
    try:
        promql_parser.parse(expr.replace("$__rate_interval", "5m"))
    except ValueError as e:
        return str(e)
    return None


def unknown_metrics(expr):
    names = set(re.findall(r"\bmrtr_[a-z_]+", expr))
    return sorted(n for n in names if n not in METRICS and re.sub(r"_(bucket|sum|count)$", "", n) not in METRICS)


before = len(failures)
dashboard = json.loads(DASHBOARD.read_text())
panel_ids = [p.get("id") for p in dashboard.get("panels", [])]
if not panel_ids or len(set(panel_ids)) != len(panel_ids):
    fail(f"{DASHBOARD}: panels missing or with duplicate ids")
for panel in dashboard.get("panels", []):
    if not panel.get("targets") or not panel.get("gridPos") or not panel.get("title"):
        fail(f"{DASHBOARD}: panel {panel.get('id')} lacks title, gridPos or targets")
    for target in panel.get("targets", []):
        if target.get("datasource", {}).get("uid") != "${datasource}":
            fail(f"{DASHBOARD}: panel {panel.get('title')!r} does not query the $datasource variable")
        if error := promql_error(target.get("expr", "")):
            fail(f"{DASHBOARD}: panel {panel.get('title')!r}: not PromQL ({error}): {target.get('expr')!r}")
    for name in unknown_metrics(" ".join(t.get("expr", "") for t in panel.get("targets", []))):
        fail(f"{DASHBOARD}: panel {panel.get('title')!r} queries {name}, which docs/operations.md does not list")
if len(failures) == before:
    ok(f"{DASHBOARD}: valid JSON, {len(panel_ids)} panels, PromQL of known metrics")

# ---- 3. Kubernetes schemas and cross-references ---------------------------------------------------
for example in sorted(EXAMPLES.glob("*.yaml")):
    objects = [d for d in yaml.safe_load_all(example.read_text()) if d]
    custom = [o for o in objects if (o.get("apiVersion"), o.get("kind")) in CUSTOM_KINDS]
    for obj in objects:
        ident = f"{example}: {obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        if (obj.get("apiVersion"), obj.get("kind")) in CUSTOM_KINDS:
            continue  # no Kubernetes schema: checked structurally below
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                fail(f"{ident}: Kubernetes {version}: {'.'.join(map(str, e.path))}: {e.message}")
            except Exception as e:  # noqa: BLE001 - unknown kinds, unsupported versions
                fail(f"{ident}: Kubernetes {version}: {e}")
    ok(f"{example}: {len(objects) - len(custom)} objects checked with kubernetes-validate {kubernetes_validate.__version__} "
       f"(strict; Kubernetes {', '.join(KUBE_VERSIONS)})"
       + (f"; skipped, checked structurally: {', '.join(sorted(o['kind'] for o in custom))}" if custom else ""))

    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    deployment = by_kind["Deployment"][0]
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    container = pod["spec"]["containers"][0]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}

    def selects(selector, what):
        if not all(pod_labels.get(k) == v for k, v in selector.items()):
            fail(f"{example}: {what} selector {selector} does not match the pod labels")

    selects(deployment["spec"]["selector"]["matchLabels"], "Deployment")
    services = by_kind.get("Service", [])
    service = services[0]
    selects(service["spec"]["selector"], "Service")
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    for port in service_ports.values():
        if port["targetPort"] not in container_ports:
            fail(f"{example}: Service port {port['name']} targets unknown container port {port['targetPort']}")
    for probe in ("livenessProbe", "readinessProbe"):
        get = container.get(probe, {}).get("httpGet")
        if not get or get.get("port") != "admin":
            fail(f"{example}: {probe} does not use the admin port")
    if container["livenessProbe"]["httpGet"]["path"] != "/healthz" or container["readinessProbe"]["httpGet"]["path"] != "/readyz":
        fail(f"{example}: probes must hit /healthz (liveness) and /readyz (readiness)")
    security = container["securityContext"]
    if not (security.get("readOnlyRootFilesystem") and security.get("runAsNonRoot")
            and security.get("allowPrivilegeEscalation") is False
            and security.get("capabilities", {}).get("drop") == ["ALL"]
            and security.get("seccompProfile", {}).get("type") == "RuntimeDefault"):
        fail(f"{example}: container securityContext is not locked down")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        selects(pdb["spec"]["selector"]["matchLabels"], "PodDisruptionBudget")
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        if hpa["spec"]["scaleTargetRef"]["name"] != deployment["metadata"]["name"]:
            fail(f"{example}: HorizontalPodAutoscaler targets another Deployment")
        if "replicas" in deployment["spec"]:
            fail(f"{example}: Deployment sets replicas while autoscaled")
    for monitor in by_kind.get("ServiceMonitor", []):
        if not all(service["metadata"]["labels"].get(k) == v
                   for k, v in monitor["spec"]["selector"]["matchLabels"].items()):
            fail(f"{example}: ServiceMonitor does not select the Service")
        for endpoint in monitor["spec"]["endpoints"]:
            if endpoint.get("port") not in service_ports or endpoint.get("path") != "/metrics":
                fail(f"{example}: ServiceMonitor endpoint {endpoint} is not the admin /metrics")

    for rule_object in by_kind.get("PrometheusRule", []):
        ident = f"{example}: PrometheusRule/{rule_object['metadata']['name']}"
        before = len(failures)
        groups = rule_object.get("spec", {}).get("groups") or []
        if not groups:
            fail(f"{ident}: no rule groups")
        if set(rule_object) - {"apiVersion", "kind", "metadata", "spec"} or set(rule_object["spec"]) != {"groups"}:
            fail(f"{ident}: unexpected fields")
        alerts = []
        for group in groups:
            if not group.get("name") or not group.get("rules"):
                fail(f"{ident}: a group without name or rules")
            for rule in group.get("rules", []):
                alerts.append(rule.get("alert"))
                extra = set(rule) - {"alert", "expr", "for", "labels", "annotations"}
                if extra or not rule.get("alert") or not isinstance(rule.get("expr"), str):
                    fail(f"{ident}: rule {rule.get('alert')} is malformed ({sorted(extra) or 'alert/expr'})")
                    continue
                if "for" in rule:
                    try:
                        seconds(rule["for"])
                    except (ValueError, KeyError):
                        fail(f"{ident}: rule {rule['alert']}: for {rule['for']!r} is no duration")
                if not rule.get("labels", {}).get("severity") or not rule.get("annotations", {}).get("summary"):
                    fail(f"{ident}: rule {rule['alert']} has no severity label or no summary")
                if error := promql_error(rule["expr"]):
                    fail(f"{ident}: rule {rule['alert']}: not PromQL ({error}): {rule['expr']!r}")
                for name in unknown_metrics(rule["expr"]):
                    fail(f"{ident}: rule {rule['alert']} uses {name}, which docs/operations.md does not list")
        if len(failures) == before:
            ok(f"{ident}: {len(alerts)} rules ({len(set(alerts))} alerts) checked structurally, PromQL parsed")
    for configmap in by_kind.get("ConfigMap", []):
        for key, value in configmap.get("data", {}).items():
            if key.endswith(".json"):
                if json.loads(value) != dashboard:
                    fail(f"{example}: ConfigMap {configmap['metadata']['name']} {key} is not {DASHBOARD}")
                else:
                    ok(f"{example}: ConfigMap {configmap['metadata']['name']} carries {DASHBOARD}")

    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    for name in mounts:
        if name not in volumes:
            fail(f"{example}: volume mount {name} has no volume")
    configmaps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    config_volume = volumes.get("config", {}).get("configMap", {}).get("name")
    if config_volume not in configmaps:
        fail(f"{example}: the config volume names no rendered ConfigMap")
        continue
    if container.get("args") != ["--config", f"{mounts['config']['mountPath']}/config.toml"]:
        fail(f"{example}: container args do not point at the mounted config.toml")
    grace = pod["spec"]["terminationGracePeriodSeconds"]

    # ---- 4. the gateway configuration --------------------------------------------------------------
    text = configmaps[config_volume]["data"]["config.toml"]
    try:
        config = tomli.loads(text)
    except tomli.TOMLDecodeError as e:
        fail(f"{example}: config.toml is not TOML: {e}")
        continue
    # The rendered file says what the values say: each table (its keys the chart adds aside), the
    # routes with their auth and policy, and the backends the routes name, read back from TOML
    # (strings with quotes or "&&" in them included).
    given = merged_config.get(example.stem)
    if given is not None:
        before = len(failures)
        used = {n for r in given.get("route", []) for n in r.get("backends", [r.get("backend")])}
        expect = {
            "route": given.get("route", []),
            "backend": {n: b for n, b in given.get("backend", {}).items() if n in used},
            **{t: given[t] for t in ("legacy", "audit") if t in given},
        }
        for table in ("server", "mrtr"):
            for key, value in given.get(table, {}).items():
                if config.get(table, {}).get(key) != value:
                    fail(f"{example}: config.toml [{table}] {key} is {config.get(table, {}).get(key)!r}, "
                         f"the values say {value!r}")
        for table, value in expect.items():
            if config.get(table) != value:
                fail(f"{example}: config.toml [{table}] differs from the values' config.{table}: "
                     f"{config.get(table)!r} != {value!r}")
        for table in set(config) - set(expect) - {"server", "mrtr", "fleet"}:
            fail(f"{example}: config.toml has [{table}], which the values do not give")
        if len(failures) == before:
            ok(f"{example}: config.toml carries the values' config "
               f"({', '.join(sorted(t for t in config if t != 'fleet'))})")
    server = config.get("server", {})
    if server.get("listen") != f"0.0.0.0:{container_ports['mcp']}" or \
            server.get("admin_listen") != f"0.0.0.0:{container_ports['admin']}":
        fail(f"{example}: listen/admin_listen do not match the container ports")
    drain = seconds(server.get("drain_timeout", "20s"))
    shutdown_delay = seconds(server.get("shutdown_delay", "5s"))
    held_ttl = seconds(config.get("mrtr", {}).get("held_ttl", "50s"))
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    pre_stop = int(pre_stop[-1]) if pre_stop[:1] == ["/bin/sleep"] else 0
    if grace <= pre_stop + shutdown_delay + drain + held_ttl:
        fail(f"{example}: terminationGracePeriodSeconds {grace} is not above preStop {pre_stop}s + "
             f"shutdown_delay {shutdown_delay:g}s + drain_timeout {drain:g}s + held_ttl {held_ttl:g}s")
    env_vars = {e["name"]: e for e in container.get("env", [])}
    fleet = config.get("fleet")
    if fleet is not None:
        peer = container_ports.get("peer")
        if peer is None:
            fail(f"{example}: [fleet] without a container port named peer")
        elif fleet.get("listen") != f"0.0.0.0:{peer}":
            fail(f"{example}: [fleet] listen {fleet.get('listen')!r} is not 0.0.0.0:<peer port> ({peer})")
        if fleet.get("advertise") != f"${{POD_IP}}:{peer}":
            fail(f"{example}: [fleet] advertise {fleet.get('advertise')!r} is not ${{POD_IP}}:<peer port>")
        if peer in (container_ports["mcp"], container_ports["admin"]):
            fail(f"{example}: the peer port {peer} is also the MCP or admin port")
        if env_vars.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "status.podIP":
            fail(f"{example}: [fleet] without env POD_IP from status.podIP")
        if not config.get("mrtr", {}).get("keys_file") and not config.get("mrtr", {}).get("keys"):
            fail(f"{example}: [fleet] without a shared key ring (mrtr.keys_file or mrtr.keys)")
        ok(f"{example}: [fleet] listens on 0.0.0.0:{peer} (container port peer) and advertises "
           f"${{POD_IP}}:{peer}, POD_IP from the downward API")
    elif "peer" in container_ports:
        fail(f"{example}: a container port named peer without [fleet]")
    if any(port["targetPort"] == "peer" for port in service_ports.values()):
        fail(f"{example}: the Service exposes the peer port (peers use pod IPs)")
    for i, route in enumerate(config.get("route", [])):
        if route.get("auth", {}).get("mode", "none") == "none" and not server.get("allow_unauthenticated"):
            fail(f"{example}: route[{i}] has no auth and allow_unauthenticated is not set")
    keys_file = config.get("mrtr", {}).get("keys_file")
    if "keys" in volumes:
        secret = volumes["keys"]["secret"]
        expected = f"{mounts['keys']['mountPath']}/{secret['items'][0]['path']}"
        if keys_file != expected:
            fail(f"{example}: mrtr.keys_file {keys_file} is not the mounted Secret file {expected}")
        generated = {s["metadata"]["name"] for s in by_kind.get("Secret", [])}
        if secret["secretName"] in generated:
            ok(f"{example}: key ring Secret {secret['secretName']} generated by the chart")
        else:
            ok(f"{example}: key ring Secret {secret['secretName']} expected to exist")
    elif keys_file:
        fail(f"{example}: mrtr.keys_file set without a mounted Secret")

    if BIN:
        # Run check-config on the rendered file, with the pod's paths mapped into a temp dir and
        # every ${NAME} it uses set.
        keys = TMP / f"{example.stem}-keys"
        keys.write_text(subprocess.run([BIN, "keygen"], capture_output=True, text=True, check=True).stdout)
        local = text.replace(f'keys_file = "{keys_file}"', f'keys_file = "{keys}"') if keys_file else text
        local_path = TMP / f"{example.stem}-config.toml"
        local_path.write_text(local)
        env = dict(os.environ)
        for var in set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text)):
            env[var] = "placeholder-" + var.lower()
        if fleet is not None:
            # An address, as the downward API gives it: inside allowed_peers when they are set.
            peers = fleet.get("allowed_peers") or ["10.0.0.0/8"]
            env["POD_IP"] = str(next(ipaddress.ip_network(peers[0]).hosts()))
        run = subprocess.run([BIN, "check-config", str(local_path)], capture_output=True, text=True, env=env)
        if run.returncode != 0:
            fail(f"{example}: mrtr-gateway check-config: {run.stderr.strip()}")
        else:
            ok(f"{example}: rendered config.toml passes mrtr-gateway check-config")
    else:
        print(f"skip {example}: no mrtr-gateway binary for check-config (set MRTR_GATEWAY_BIN)")

print()
if failures:
    print(f"helm-validate: {len(failures)} failure(s)")
    sys.exit(1)
print("helm-validate: all checks passed")
PY
