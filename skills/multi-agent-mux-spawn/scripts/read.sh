#!/usr/bin/env bash
# read.sh [--backend B] NAME [SERVER]: an agent's recent output, through `mam exec` (never starts a server).
# The backend, server and host are those of NAME's registry row, found the way `mam stop NAME` finds it.
set -euo pipefail
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
. "$here/common.sh"
mam_split "$@"
set -- ${mam_args[@]+"${mam_args[@]}"}
if [ $# -lt 1 ] || [ $# -gt 2 ]; then echo "usage: read.sh [--backend B] NAME [SERVER]" >&2; exit 2; fi
# NAME reaches the multiplexer's own command line: it must be a name, never an option
if ! [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then echo "read.sh: invalid agent name: $1" >&2; exit 2; fi
mam_find
export MAM_NO_AUTOSTART=1
if ! command -v python3 >/dev/null 2>&1; then
  echo "read.sh: python3 not found: it reads the agent's row from \`mam status --json\`" >&2
  exit 127
fi
only=(); if [ $# -eq 2 ]; then only=(--server "$2"); fi
# NAME's row (its backend, server and host), or, when it has none, the backend mam itself would use: one line
# each of backend, server, host (empty: this machine), or an error on stderr and no line.
rows=$(mam_run status --json --no-state ${only[@]+"${only[@]}"} 2>/dev/null || true)
default=$(mam_run backends --json 2>/dev/null || true)
place=$(python3 -I -c '
import json, sys
name, server = sys.argv[1], sys.argv[2]
def load(text):
    try:
        return json.loads(text)
    except ValueError:
        return {}
rows = [s for s in load(sys.argv[3]).get("sessions") or [] if s.get("name") == name]
if len(rows) > 1:
    places = ", ".join(sorted("%s server %s" % (r.get("backend"), r.get("server")) for r in rows))
    print(f"read.sh: {name} is registered on several servers ({places}): pass SERVER (or --backend)", file=sys.stderr)
    sys.exit(2)
if rows:
    row = rows[0]
    print(row.get("backend") or "", row.get("server") or "", row.get("host") or "", sep="\n")
else:
    backend = next((b["name"] for b in load(sys.argv[4]).get("backends", []) if b.get("default")), "")
    print(backend, server, "", sep="\n")
' "$1" "${2:-${MAM_SERVER:-mam}}" "$rows" "$default")
mapfile -t where <<<"$place"
backend=${where[0]:-} server=${where[1]:-} host=${where[2]:-}
via=(--backend "$backend" exec --server "$server")
if [ -n "$host" ]; then via+=(--host "$host"); fi
# The screen's blank rows below its last line are not output (tmux and herdr both print them): $(...) drops them.
case "$backend" in
  tmux) out=$("${mam_cmd[@]}" "${via[@]}" -- capture-pane -p -t "=$1:") ;;
  herdr) out=$("${mam_cmd[@]}" "${via[@]}" -- agent read "$1" --source recent --lines 50) ;;
  *) echo "read.sh: cannot read an agent's pane on backend '${backend:-?}'; use mam exec with its own CLI" >&2
     exit 1 ;;
esac
if [ -n "$out" ]; then printf '%s\n' "$out"; fi
