#!/usr/bin/env bash
# read.sh NAME [SERVER]: an agent's recent output, through `mam exec` (never starts a server).
set -euo pipefail
if [ $# -lt 1 ]; then echo "usage: read.sh NAME [SERVER]" >&2; exit 2; fi
export MAM_NO_AUTOSTART=1
backend=${MAM_BACKEND:-herdr}
server=${2:-${MAM_SERVER:-mam}}
case "$backend" in
  tmux) exec mam --backend tmux exec --server "$server" -- capture-pane -p -t "=$1:" ;;
  *) exec mam --backend "$backend" exec --server "$server" -- agent read "$1" --source recent --lines 50 ;;
esac
