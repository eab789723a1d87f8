#!/usr/bin/env bash
# stop.sh NAME [SERVER]: close an agent's pane through mam and mark its row.
set -euo pipefail
if [ $# -lt 1 ]; then echo "usage: stop.sh NAME [SERVER]" >&2; exit 2; fi
if [ $# -ge 2 ]; then
  exec mam --backend "${MAM_BACKEND:-herdr}" stop "$1" --server "$2" --json
fi
exec mam --backend "${MAM_BACKEND:-herdr}" stop "$1" --json
