"""Copy mam's JSON from stdin to stdout as it comes; after each document, name on stderr every server that
could not be asked, and why. Exit 5 when the last document is not confirmed (see common.sh).

The text shown is mam's, which may carry a multiplexer's own words: control characters are replaced.
"""

import json
import signal
import sys
from typing import Any

NOT_CONFIRMED = 5


def clean(value: object) -> str:
    return "".join(c if c.isprintable() else "?" for c in str(value))


def report(script: str, doc: Any) -> int:
    if not isinstance(doc, dict) or "error" in doc:
        return 0  # mam failed: it said why, and its exit code is the script's
    unknown = [s for s in doc.get("servers") or [] if isinstance(s, dict) and s.get("state") == "unknown"]
    if not unknown and doc.get("confirmed", True) is True:
        return 0
    for server in unknown:
        error = server.get("error") or {}
        print(f"{script}: not confirmed: {clean(server.get('backend'))} server {clean(server.get('server'))} "
              f"could not be asked: {clean(error.get('kind', 'unknown'))}: {clean(error.get('message', '-'))}",
              file=sys.stderr)
    rows = doc.get("unconfirmed") or []
    if rows:
        print(f"{script}: not confirmed: {len(rows)} registered agent(s) on those servers get no drift: "
              + ", ".join(clean(r) for r in rows), file=sys.stderr)
    print(f"{script}: their agents may be alive or dead: do not act on them until the server answers",
          file=sys.stderr)
    sys.stderr.flush()
    return NOT_CONFIRMED


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is for mam: print what it still writes
    script = sys.argv[1] if len(sys.argv) > 1 else "mam"
    code, buffer = 0, []
    for line in sys.stdin:
        sys.stdout.write(line)
        sys.stdout.flush()
        buffer.append(line)
        # A document ends with a "}" at the start of a line (indented JSON) or at the end of its only line.
        if line[:1].isspace() or not line.rstrip().endswith("}"):
            continue
        try:
            doc = json.loads("".join(buffer))
        except ValueError:
            continue
        buffer = []
        code = report(script, doc)
    return code


if __name__ == "__main__":
    sys.exit(main())
