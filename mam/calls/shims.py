"""mam's shims: `herdr`, `tmux` and `zellij` stand-ins that route a script's calls through `mam exec`, and how
mam recognises them so that no shim ever runs itself. No import of the app: the scrubbed environment uses it."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mam.util.errors import MamError
from mam.util.quote import shown

if TYPE_CHECKING:
    from mam.plugin.records import BackendSpec

# Deferred imports (inside functions), for start-up: the safe-file helpers load only when shims are written.

SHIM_MARKER = ".mam-shim"  # a folder holding this file is a shim folder: never searched for a real binary
SHIM_SIGNATURE = b"# mam shim:"  # the second line of every shim, old or new: how a copy is recognised
SHIM_GUARD = "MAM_SHIM_GUARD"  # set by a shim for its own call: "PID:START" of the process that ran it


def path_without_shims(path: str) -> str:
    """PATH without mam's shim folders, so the real binary is found and a shim never runs itself."""
    return os.pathsep.join(p for p in path.split(os.pathsep) if p and not (Path(p) / SHIM_MARKER).exists())


def is_shim(program: str) -> bool:
    """A mam shim, whatever its name and folder: it resolves into a shim folder, or it is a copy of a shim."""
    real = Path(program).resolve()
    if (real.parent / SHIM_MARKER).exists():
        return True
    return SHIM_SIGNATURE in _head(str(real), 4096)  # its second line, after a shebang of any length


def is_native_binary(program: str) -> bool:
    """An ELF binary (the real tmux, herdr or zellij), which never runs a shim itself; a script may."""
    return _head(program, 4) == b"\x7fELF"


def _head(program: str, size: int) -> bytes:
    """The first bytes of `program` (fewer where a read returns less), b"" where it cannot be read."""
    try:
        fd = os.open(program, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO on PATH must not block
    except OSError:
        return b""
    try:
        return os.read(fd, size)
    except OSError:
        return b""
    finally:
        os.close(fd)


# A shim runs before mam is imported, so it checks its guard itself; only the standard library.
_SHIM = """#!{python}
# mam shim: `{backend} ARGS` runs as `mam --backend {backend} exec -- ARGS` against $MAM_SERVER.
# A shim never runs itself: reached again from its own call (a link or copy of it elsewhere on PATH, a wrapper
# that calls it), it stops with one line. {guard} names the process that ran the first shim: pid and start time.
import os
import sys


def stat(pid):
    # (parent pid, start time) of a live process, or None where /proc cannot tell
    try:
        with open(f"/proc/{{pid}}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), fields[19].decode()
    except (OSError, IndexError, ValueError):
        return None


def mark(pid):
    own = stat(pid)
    return f"{{pid}}:{{own[1] if own else ''}}"


def called_by_a_shim():
    guard = os.environ.get("{guard}")
    if not guard:
        return False
    pid = os.getpid()
    if stat(pid) is None:  # no /proc: only this process and its parent can be checked
        return guard.split(":")[0] in (str(pid), str(os.getppid()))
    for _ in range(64):  # this process (a shim exec'ed in the same process) or any live ancestor
        if mark(pid) == guard:
            return True
        up = stat(pid)
        if up is None or up[0] <= 1:
            return False
        pid = up[0]
    return False


if called_by_a_shim():
    sys.stderr.write(f"mam shim: {{sys.argv[0]!r}} was reached again from its own call (a shim linked or copied "
                     "out of its folder, or a wrapper that calls one): nothing was run; put the real {backend} "
                     "before it on PATH\\n")
    sys.exit(1)
os.environ["{guard}"] = mark(os.getpid())
os.execv(sys.executable, [sys.executable, "-m", "mam", "--backend", "{backend}", "exec", "--", *sys.argv[1:]])
"""


def shim_source(backend: str) -> str:
    return _SHIM.format(python=sys.executable, backend=backend, guard=SHIM_GUARD)


_EXECUTABLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def shimmed_backends(specs: Iterable[BackendSpec]) -> dict[str, str]:
    """The shims to write, built from the backends' own declarations: executable name -> backend. Only a backend
    that declares how its command line picks a server (`server_options`) gets one, since `mam exec` must refuse
    those options to keep the shim on mam's server; and only a plain file name, so no shim lands elsewhere."""
    return {spec.executable: spec.name for spec in specs
            if spec.executable and spec.server_options.names and _EXECUTABLE.fullmatch(spec.executable)}


def install_shims(directory: Path, backends: Mapping[str, str], only_shims: bool = False) -> list[Path]:
    """One shim per backend (`backends` maps its executable's name to the backend), in `directory`. `only_shims`
    (the workspace's own .mam/shim, which a clone can fill): a folder holding anything but mam's shims is refused,
    nothing written, since the user is told to put it first on PATH."""
    from mam.util.safefile import open_folder, replace_in

    try:
        # Neither the folder nor a shim is ever written through a symbolic link planted in its place: a linked
        # folder is refused, a linked shim replaced (a clone could otherwise have mam overwrite, mode 0755, any
        # file the user can write).
        folder = open_folder(directory, "shim folder")
        try:
            foreign = _not_shims(folder, set(backends)) if only_shims else []
            if foreign:
                raise MamError("operation_failed", f"{directory}: holds {', '.join(shown(n, 60) for n in foreign[:5])}"
                               f"{' ...' if len(foreign) > 5 else ''}, not mam's shims: a folder to put first on PATH "
                               "holds nothing else (a clone can carry such a file)",
                               hint="look at it, remove what you did not put there, then run `mam shim install` again")
            replace_in(folder, SHIM_MARKER, b"mam shim folder: mam never looks for real binaries here\n", 0o644)
            written = []
            for executable, backend in sorted(backends.items()):
                replace_in(folder, executable, shim_source(backend).encode("utf-8"), 0o755)
                written.append(directory / executable)
        finally:
            os.close(folder)
    except OSError as exc:
        raise MamError("operation_failed", f"{directory}: cannot write the shims: {exc.strerror or exc}") from None
    return written



def _not_shims(folder: int, ours: set[str]) -> list[str]:
    """The entries of the folder `folder` other than mam's marker and the shims about to be written (`ours`),
    sorted. Content proves nothing (a clone can copy a shim's signature line into any script)."""
    return sorted(name for name in os.listdir(folder) if name not in ours and name != SHIM_MARKER)
