#!/usr/bin/env bash
# Query only: every registered agent next to what its server says now. Extra arguments go to `mam status`.
set -euo pipefail
export MAM_NO_AUTOSTART=1
exec mam --backend "${MAM_BACKEND:-herdr}" status --json "$@"
