# Sourced by this skill's scripts: how to find and run mam, and how to say that an answer is incomplete.
# Every skill carries the same copy of this file, so a skill installed on its own still works.
#
# Exit codes, beyond mam's own (0 done, 1 an operation failed, 2 bad input, 3 backend or its binary not
# found, 4 a backend plugin failed to load):
#   5    not confirmed: some server could not be asked (stderr says which and why; the JSON is still printed)
#   127  mam is not installed (stderr says how to get it)

mam_script=${0##*/}
# What these scripts do is recorded in mam's audit trail (.mam/audit.jsonl) as a skill's, not a person's.
export MAM_FACE=skill

# The backend is mam's own choice (--backend, then $MAM_BACKEND, then `backend:` in .mam/config.yaml, then
# herdr), so a script passes --backend only when its caller gave one.
mam_global=()
mam_args=()

# mam_split ARGS...: take `--backend NAME`, `--backend=NAME` or `-b NAME` out of ARGS (up to a `--`) into
# mam_global; the rest goes to mam_args.
mam_split() {
  while [ $# -gt 0 ]; do
    case $1 in
      --) mam_args+=("$@"); return ;;
      --backend | -b)
        if [ $# -lt 2 ]; then echo "$mam_script: $1 needs a backend name" >&2; exit 2; fi
        mam_global=(--backend "$2"); shift 2 ;;
      --backend=*) mam_global=("$1"); shift ;;
      *) mam_args+=("$1"); shift ;;
    esac
  done
}

# mam_find: `mam` on PATH, else `python3 -m mam` when python3 can import it, else say how to get it.
mam_find() {
  if command -v mam >/dev/null 2>&1; then
    mam_cmd=(mam)
  elif command -v python3 >/dev/null 2>&1 && python3 -P -c 'import mam.cli.main' >/dev/null 2>&1; then
    mam_cmd=(python3 -P -m mam)  # -P: never a `mam` folder that happens to be in the current directory
  else
    echo "$mam_script: mam (the multi-agent mux) is not installed: not on PATH, and python3 cannot import it" >&2
    echo "hint: install it from its source checkout with 'python3 -m pip install -e /path/to/mam' (or" \
         "'pipx install /path/to/mam'); the PyPI package named mam is another project" >&2
    exit 127
  fi
}

# mam_run ARGS...: mam, with the caller's --backend if there was one.
mam_run() {
  "${mam_cmd[@]}" ${mam_global[@]+"${mam_global[@]}"} "$@"
}

# mam_checked ARGS...: mam_run, its JSON passed through confirmed.py, which names on stderr every server that
# could not be asked and exits 5 then. mam's own exit code wins when it is not 0.
mam_checked() {
  if ! command -v python3 >/dev/null 2>&1; then
    echo "$mam_script: python3 not found, so this script cannot check that the answer is confirmed:" \
         "a server whose state is unknown could not be asked" >&2
    mam_run "$@"
    return
  fi
  set +e
  mam_run "$@" | python3 -I "$here/confirmed.py" "$mam_script"
  local codes=("${PIPESTATUS[@]}")
  set -e
  if [ "${codes[0]}" -ne 0 ]; then return "${codes[0]}"; fi
  return "${codes[1]}"
}
