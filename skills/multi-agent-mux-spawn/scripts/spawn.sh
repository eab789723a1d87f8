#!/usr/bin/env bash
# spawn.sh [--backend B] NAME KIND [SERVER] [-- ARGS...]: start an agent through mam (scrubbed, registered).
set -euo pipefail
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
. "$here/common.sh"
mam_split "$@"
set -- ${mam_args[@]+"${mam_args[@]}"}
if [ $# -lt 2 ]; then echo "usage: spawn.sh [--backend B] NAME KIND [SERVER] [-- ARGS...]" >&2; exit 2; fi
mam_find
name=$1 kind=$2; shift 2
server=${MAM_SERVER:-mam}
if [ $# -gt 0 ] && [ "$1" != "--" ]; then server=$1; shift; fi
if [ "${1:-}" = "--" ]; then shift; fi
mam_run spawn "$name" --json --agent "$kind" --server "$server" -- "$@"
