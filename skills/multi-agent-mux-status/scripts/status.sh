#!/usr/bin/env bash
# Query only: every registered agent next to what its server says now, as JSON. Extra arguments go to
# `mam status` (e.g. --server NAME); --backend NAME picks one backend, as $MAM_BACKEND does.
set -euo pipefail
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
. "$here/common.sh"
mam_split "$@"
mam_find
export MAM_NO_AUTOSTART=1
mam_checked status --json ${mam_args[@]+"${mam_args[@]}"}
