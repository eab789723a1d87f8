#!/usr/bin/env bash
# read.sh [--backend B] NAME [SERVER]: an agent's recent output, through `mam exec` (never starts a server).
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
server=${2:-${MAM_SERVER:-mam}}
if ! command -v python3 >/dev/null 2>&1; then
  echo "read.sh: python3 not found: it reads which backend mam uses from \`mam backends --json\`" >&2
  exit 127
fi
# The backend mam itself would use; how to read a pane depends on it.
backend=$(mam_run backends --json | python3 -I -c '
import json, sys
doc = json.load(sys.stdin)
print(next((b["name"] for b in doc.get("backends", []) if b.get("default")), ""))')
case "$backend" in
  tmux) mam_run exec --server "$server" -- capture-pane -p -t "=$1:" ;;
  herdr) mam_run exec --server "$server" -- agent read "$1" --source recent --lines 50 ;;
  *) echo "read.sh: cannot read an agent's pane on backend '${backend:-?}'; use mam exec with its own CLI" >&2
     exit 1 ;;
esac
