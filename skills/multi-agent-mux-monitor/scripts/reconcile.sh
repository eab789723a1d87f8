#!/usr/bin/env bash
# Registry vs. live servers, as drift. Writes only with --apply. Extra arguments go to `mam reconcile`.
set -euo pipefail
export MAM_NO_AUTOSTART=1
exec mam --backend "${MAM_BACKEND:-herdr}" reconcile --json "$@"
