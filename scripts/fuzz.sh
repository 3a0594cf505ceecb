#!/usr/bin/env bash
# Bounded fuzzing of the front request parser/validator, requestState opening, answer
# validation, route policies (rules, conditions, identity expressions) and authorization
# headers (bearer tokens, scopes, the step-up challenge), from the committed
# seed corpus. Fails on any crash. Needs the nightly toolchain (libFuzzer and sanitizers) and
# cargo-fuzz, installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${FUZZ_SECONDS:-60}
# A fixed seed by default, so a CI run explores the same way each time; FUZZ_SEED=0 lets
# libFuzzer pick one.
SEED=${FUZZ_SEED:-1}
CARGO_FUZZ_VERSION=0.13.2
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "fuzz: the nightly toolchain is required (rustup toolchain install nightly)" >&2
  exit 1
fi
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for target in front_request request_state answers policy authorization; do
  mkdir -p "$work/$target"
  echo "== fuzz $target for ${SECONDS_PER_TARGET}s"
  # New inputs go to the scratch corpus; the committed seeds are read only.
  if ! cargo +nightly fuzz run --fuzz-dir tests/fuzz "$target" \
      "$work/$target" "tests/fuzz/corpus/$target" -- \
      -max_total_time="$SECONDS_PER_TARGET" -seed="$SEED" -rss_limit_mb=2048 -print_final_stats=1 \
      >"$work/$target.log" 2>&1; then
    echo "fuzz: $target FAILED" >&2
    grep -E 'panicked|ERROR|SUMMARY|assertion' "$work/$target.log" | head -n 20 >&2 || true
    tail -n 40 "$work/$target.log" >&2
    status=1
  else
    grep -E 'stat::number_of_executed_units|Done [0-9]+ runs' "$work/$target.log" | tail -n 2 || true
    echo "fuzz: $target ok (no crash)"
  fi
done
exit "$status"
