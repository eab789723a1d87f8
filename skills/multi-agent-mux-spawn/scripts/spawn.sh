#!/usr/bin/env bash
# spawn.sh NAME KIND [SERVER] [-- ARGS...]: start an agent through mam (scrubbed, registered).
set -euo pipefail
if [ $# -lt 2 ]; then echo "usage: spawn.sh NAME KIND [SERVER] [-- ARGS...]" >&2; exit 2; fi
name=$1 kind=$2; shift 2
server=${MAM_SERVER:-mam}
if [ $# -gt 0 ] && [ "$1" != "--" ]; then server=$1; shift; fi
[ "${1:-}" = "--" ] && shift
exec mam --backend "${MAM_BACKEND:-herdr}" spawn "$name" --json --agent "$kind" --server "$server" -- "$@"
