#!/usr/bin/env python3
"""The gateway configuration out of a rendered chart, with addresses substituted.

  chart_config.py RENDERED [PATTERN REPLACEMENT]...

Prints the `config.toml` of the rendered ConfigMap (a literal block indented by four spaces),
each PATTERN (a multi-line regular expression) replaced by its REPLACEMENT. A pattern that does
not match exactly once is an error: a chart change the test did not expect fails loudly.
"""

import re
import sys


def main(argv):
    if len(argv) < 2 or len(argv) % 2:
        sys.exit(__doc__)
    lines = open(argv[1]).read().split("\n")
    start = lines.index("  config.toml: |") + 1
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    text = "\n".join(block).rstrip() + "\n"
    for pattern, replacement in zip(argv[2::2], argv[3::2]):
        text, n = re.subn(pattern, lambda _: replacement, text, flags=re.M)
        if n != 1:
            sys.exit(f"chart config: expected one match of {pattern!r}, found {n}")
    sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv)
