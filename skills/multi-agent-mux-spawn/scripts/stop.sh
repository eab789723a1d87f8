#!/usr/bin/env bash
# stop.sh [--backend B] NAME [SERVER]: close an agent's pane through mam and mark its row.
set -euo pipefail
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
. "$here/common.sh"
mam_split "$@"
set -- ${mam_args[@]+"${mam_args[@]}"}
if [ $# -lt 1 ] || [ $# -gt 2 ]; then echo "usage: stop.sh [--backend B] NAME [SERVER]" >&2; exit 2; fi
mam_find
if [ $# -eq 2 ]; then
  mam_run stop "$1" --server "$2" --json
else
  mam_run stop "$1" --json
fi
