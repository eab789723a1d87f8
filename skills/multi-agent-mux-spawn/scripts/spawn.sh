#!/usr/bin/env bash
# spawn.sh [--backend B] [--command CMD] [--cwd DIR] [--env NAME]... [--host HOST] [--worktree [--branch BRANCH]]
#          NAME KIND [SERVER] [-- ARGS...]:
# start an agent through mam (scrubbed, registered). The options go to `mam spawn` as they are.
set -euo pipefail
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
. "$here/common.sh"
usage="usage: spawn.sh [--backend B] [--command CMD] [--cwd DIR] [--env NAME]... [--host HOST] [--worktree [--branch BRANCH]] NAME KIND [SERVER] [-- ARGS...]"
mam_split "$@"
set -- ${mam_args[@]+"${mam_args[@]}"}
options=() words=()
while [ $# -gt 0 ]; do
  case $1 in
    --) break ;;
    --worktree) options+=("$1"); shift ;;
    --command | --cwd | --env | --host | --branch)
      if [ $# -lt 2 ]; then echo "spawn.sh: $1 needs a value" >&2; echo "$usage" >&2; exit 2; fi
      options+=("$1" "$2"); shift 2 ;;
    --command=* | --cwd=* | --env=* | --host=* | --branch=*) options+=("$1"); shift ;;
    -*) echo "spawn.sh: unknown option: $1" >&2; echo "$usage" >&2; exit 2 ;;
    *) words+=("$1"); shift ;;
  esac
done
if [ ${#words[@]} -lt 2 ] || [ ${#words[@]} -gt 3 ]; then echo "$usage" >&2; exit 2; fi
if [ "${1:-}" = "--" ]; then shift; fi
mam_find
server=${words[2]:-${MAM_SERVER:-mam}}
mam_run spawn "${words[0]}" --json --agent "${words[1]}" --server "$server" ${options[@]+"${options[@]}"} -- "$@"
