#!/usr/bin/env python3
"""Gate over the results of `conformance server ... --requirements 2026-07-28 -o OUT_DIR`.

Fails unless
  * every scenario REQUIRED for 2026-07-28 (the `server:` list of the conformance package's
    requirements/2026-07-28.yaml) has a checks.json in OUT_DIR with no FAILURE check, and
  * the not-scored (pending) header scenarios `http-header-validation` and
    `http-custom-header-server-validation` pass the same way (the gateway implements SEP-2243),
    and
  * the `subscriptions/listen` checks of `server-stateless` are SUCCESS, not merely not failed:
    the suite reports the list-changed ones as SHOULD (a WARNING), the gateway delivers them.

WARNING, SKIPPED and INFO checks never fail a scenario (as in the suite's own exit code); a
scenario whose checks.json is missing or empty does. Other not-scored scenarios (tasks-*,
json-schema-2020-12) are listed for information only.

The same gate serves the 2025-11-25 run (legacy clients at the same endpoint): give that
revision's YAML, its own --also scenarios (with --also-name) and --succeed checks.

usage: conformance_gate.py OUT_DIR [--requirements YAML] [--also SCENARIO]... [--also-name TEXT]
                                   [--succeed SCENARIO:CHECK]... [--json FILE] [--label TEXT]
Prints a per-scenario summary and a last line starting with `conformance[LABEL]: PASS` or
`conformance[LABEL]: FAIL`. Exit status 0 on pass, 1 on fail, 2 on a usage error or when
OUT_DIR holds no results at all.
"""
import argparse
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_REQ = os.path.join(HERE, '..', 'tests', 'interop', 'node_modules', '@modelcontextprotocol',
                           'conformance', 'requirements', '2026-07-28.yaml')
DEFAULT_ALSO = ['http-header-validation', 'http-custom-header-server-validation']
# Checks that must be SUCCESS (scenario:check id): the listen stream, acknowledgement first,
# tagged, filtered, and the list changes of a legacy backend relayed onto it.
DEFAULT_SUCCEED = [f'server-stateless:sep-2575-{c}' for c in (
    'server-sends-subscription-ack', 'server-tags-subscription-id',
    'server-honors-notification-filter', 'server-sends-tools-list-changed-on-subscription',
    'server-sends-prompts-list-changed-on-subscription')]

# Frozen copy of the `server:` list of requirements/2026-07-28.yaml in
# @modelcontextprotocol/conformance@0.2.0-alpha.12, used when the YAML cannot be read.
FROZEN_REQUIRED = """server-stateless completion-complete tools-list tools-call-simple-text tools-call-image
tools-call-audio tools-call-embedded-resource tools-call-mixed-content tools-call-error
tools-call-with-progress server-sse-multiple-streams resources-list resources-read-text
resources-read-binary resources-templates-read sep-2164-resource-not-found prompts-list
prompts-get-simple prompts-get-with-args prompts-get-embedded-resource prompts-get-with-image
dns-rebinding-protection caching input-required-result-basic-elicitation
input-required-result-basic-sampling input-required-result-basic-list-roots
input-required-result-request-state input-required-result-multiple-input-requests
input-required-result-multi-round input-required-result-missing-input-response
input-required-result-non-tool-request input-required-result-result-type
input-required-result-unsupported-methods input-required-result-tampered-state
input-required-result-capability-check input-required-result-ignore-extra-params
input-required-result-validate-input""".split()

# Result directories are  server-<scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>
DIR_RE = re.compile(r'^server-(.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$')


def required_from_yaml(path):
    """The `server:` list of a requirements YAML (top-level key, `  - name` items)."""
    with open(path, encoding='utf-8') as f:
        txt = f.read()
    m = re.search(r'^server:\s*\n((?:[ \t]+-[^\n]*\n|[ \t]*#[^\n]*\n|[ \t]*\n)+)', txt, re.M)
    if not m:
        raise ValueError(f'{path}: no top-level server: list')
    names = re.findall(r'^[ \t]+-[ \t]+([^\s#]+)', m.group(1), re.M)
    if not names:
        raise ValueError(f'{path}: empty server: list')
    return names


def short(s, n=200):
    s = ' '.join(str(s or '').split())
    return s if len(s) <= n else s[:n] + '…'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('out_dir')
    ap.add_argument('--requirements', default=None, help='requirements YAML (default: the installed package\'s 2026-07-28.yaml)')
    ap.add_argument('--also', action='append', default=None, help='extra scenario that must pass (default: the two SEP-2243 header scenarios)')
    ap.add_argument('--also-name', default='header scenarios', help='what the --also scenarios are, for the summary line')
    ap.add_argument('--succeed', action='append', default=None, metavar='SCENARIO:CHECK',
                    help='check that must be SUCCESS (default: the subscriptions/listen checks)')
    ap.add_argument('--json', dest='json_out', default=None, help='write a machine-readable summary here')
    ap.add_argument('--label', default='', help='label for the summary line, e.g. the backend transport')
    a = ap.parse_args()

    req_path = a.requirements or DEFAULT_REQ
    source = req_path
    try:
        required = required_from_yaml(req_path)
    except (OSError, ValueError) as e:
        if a.requirements:
            print(f'conformance_gate: {e}', file=sys.stderr)
            return 2
        required = FROZEN_REQUIRED
        source = 'frozen list (0.2.0-alpha.12)'
    also = a.also if a.also is not None else DEFAULT_ALSO
    succeed = a.succeed if a.succeed is not None else DEFAULT_SUCCEED
    label = f'[{a.label}]' if a.label else ''

    if not os.path.isdir(a.out_dir):
        print(f'conformance{label}: FAIL no result directory {a.out_dir}')
        return 2
    seen = {}
    for f in glob.glob(os.path.join(a.out_dir, '*', 'checks.json')):
        m = DIR_RE.match(os.path.basename(os.path.dirname(f)))
        if m:
            seen.setdefault(m.group(1), []).append(f)
    if not seen:
        print(f'conformance{label}: FAIL no checks.json under {a.out_dir}')
        return 2

    def judge(sc):
        files = seen.get(sc)
        if not files:
            return {'scenario': sc, 'status': 'MISSING', 'checks': 0, 'warnings': 0, 'failures': []}
        path = sorted(files)[-1]  # newest run of that scenario
        try:
            with open(path, encoding='utf-8') as fh:
                checks = json.load(fh)
        except (OSError, ValueError) as e:
            return {'scenario': sc, 'status': 'FAIL', 'checks': 0, 'warnings': 0, 'failures': [f'unreadable {path}: {e}']}
        if not isinstance(checks, list):
            checks = []
        fails = [c for c in checks if c.get('status') == 'FAILURE']
        warns = [c for c in checks if c.get('status') == 'WARNING']
        status = 'ok' if checks and not fails else 'FAIL'
        failures = [f"{c.get('id')}: {short(c.get('errorMessage') or c.get('description'))}" for c in fails]
        if not checks:
            failures = ['no checks']
        return {'scenario': sc, 'status': status, 'checks': len(checks), 'warnings': len(warns),
                'failures': failures, 'file': path,
                'warningDetails': [f"{c.get('id')}: {short(c.get('errorMessage') or c.get('description'), 120)}" for c in warns]}

    def judge_check(spec):
        sc, _, check_id = spec.partition(':')
        files = seen.get(sc)
        status = 'MISSING'
        if files:
            try:
                with open(sorted(files)[-1], encoding='utf-8') as fh:
                    checks = json.load(fh)
            except (OSError, ValueError):
                checks = []
            found = [c for c in checks if isinstance(c, dict) and c.get('id') == check_id]
            if found:
                status = found[-1].get('status') or 'MISSING'
                message = found[-1].get('errorMessage')
                if status != 'SUCCESS' and message:
                    status += f': {short(message, 160)}'
        return {'check': spec, 'status': 'ok' if status == 'SUCCESS' else status}

    req_results = [judge(sc) for sc in required]
    check_results = [judge_check(spec) for spec in succeed]
    also_results = [judge(sc) for sc in also]
    others = sorted(set(seen) - set(required) - set(also))
    other_results = [judge(sc) for sc in others]

    def show(title, results):
        print(title)
        for r in results:
            st = r['status']
            extra = f" ({r['checks']} checks, {r['warnings']} warnings)" if st == 'ok' else ''
            print(f"  {st:<8} {r['scenario']}{extra}")
            for fl in r['failures']:
                print(f'             - {fl}')

    print(f'conformance results in {a.out_dir}  (required list: {source})')
    revision = os.path.basename(req_path).removesuffix('.yaml')
    show(f'required for {revision} ({len(required)}):', req_results)
    show(f'not scored by the suite, required here ({len(also)}):', also_results)
    print(f'checks that must succeed ({len(check_results)}):')
    for r in check_results:
        print(f"  {'ok' if r['status'] == 'ok' else 'FAIL':<8} {r['check']}" + ('' if r['status'] == 'ok' else f" ({r['status']})"))
    if other_results:
        print(f'not scored, for information ({len(other_results)}):')
        for r in other_results:
            print(f"  {'ok' if r['status'] == 'ok' else 'fail':<8} {r['scenario']}")

    req_ok = sum(r['status'] == 'ok' for r in req_results)
    also_ok = sum(r['status'] == 'ok' for r in also_results)
    checks_ok = sum(r['status'] == 'ok' for r in check_results)
    passed = req_ok == len(req_results) and also_ok == len(also_results) and checks_ok == len(check_results)
    failing = [r['scenario'] for r in req_results + also_results if r['status'] != 'ok']
    failing += [r['check'] for r in check_results if r['status'] != 'ok']
    line = (f"conformance{label}: {'PASS' if passed else 'FAIL'} "
            f"{req_ok}/{len(req_results)} required, {also_ok}/{len(also_results)} {a.also_name}, "
            f"{checks_ok}/{len(check_results)} checks that must succeed")
    if failing:
        line += f" (failing: {', '.join(failing)})"
    print()
    print(line)
    if a.json_out:
        with open(a.json_out, 'w', encoding='utf-8') as fh:
            json.dump({'label': a.label, 'pass': passed, 'summary': line, 'outDir': a.out_dir,
                       'requiredSource': source, 'required': req_results, 'also': also_results, 'checks': check_results,
                       'informational': other_results}, fh, indent=2)
            fh.write('\n')
    return 0 if passed else 1


if __name__ == '__main__':
    sys.exit(main())
