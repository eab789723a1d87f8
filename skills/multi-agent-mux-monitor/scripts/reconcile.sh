#!/usr/bin/env bash
# Registry vs. live servers, as drift, in JSON. Writes only with --apply. Extra arguments go to
# `mam reconcile` (--apply, --adopt, --watch SECONDS); --backend NAME picks one backend, as $MAM_BACKEND does.
set -euo pipefail
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
. "$here/common.sh"
mam_split "$@"
mam_find
export MAM_NO_AUTOSTART=1
mam_checked reconcile --json ${mam_args[@]+"${mam_args[@]}"}
