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
# The workspace root, for mam and (without --cwd) for the agent, never this skill's folder, where its examples
# run: the root named by $MAM_WORKSPACE, $WORKSPACE_ROOT or $CLAUDE_PROJECT_DIR (mam's own order), else the
# nearest folder above with a .mam, else the folder that holds the installed skills' folder (.agents/skills).
root=${MAM_WORKSPACE:-${WORKSPACE_ROOT:-${CLAUDE_PROJECT_DIR:-}}}
if [ -z "$root" ]; then
  dir=$PWD
  while [ "$dir" != / ] && [ ! -d "$dir/.mam" ]; do dir=${dir%/*}; dir=${dir:-/}; done
  if [ -d "$dir/.mam" ]; then root=$dir; else root=$(cd "$here/../../../.." && pwd -P); fi
  mam_global+=(--workspace "$root")
fi
place=${MAM_HOST:-}  # an agent on another host needs --cwd there: mam says so
for option in ${options[@]+"${options[@]}"}; do
  case $option in --cwd | --cwd=* | --host | --host=*) place=given ;; esac
done
if [ -z "$place" ]; then options+=(--cwd "$root"); fi
mam_run spawn "${words[0]}" --json --agent "${words[1]}" --server "$server" ${options[@]+"${options[@]}"} -- "$@"
