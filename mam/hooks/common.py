"""What every kind's hook file shares: where it is, the command mam puts in it, the backup, the diff."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mam.util.errors import MamError

# Deferred imports (inside functions), for start-up: the safe-file helpers load only when a hook file is read or
# written.

PROGRAM = "mam"  # found on the agent's PATH when its hook runs
BACKUP_SUFFIX = ".mam-backup"
MAX_FILE = 4 * 1024 * 1024
# `mam hooks install --absolute`: the hooks run this mam by its path, not the `mam` of the agent's PATH (set once,
# by the command, before any file is edited).
_ABSOLUTE: list[str] = []


def running_mam() -> str | None:
    """The absolute path of the `mam` script this process runs as (for `python3 -m mam`: the one installed beside
    this Python), or None when there is none to name."""
    import sys

    arg0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(arg0) == PROGRAM and os.path.isfile(arg0):
        return os.path.abspath(arg0)
    beside = Path(sys.executable).parent / PROGRAM
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def use_absolute(path: str) -> None:
    _ABSOLUTE[:] = [path]


def program() -> str:
    """The program mam's hooks run: `mam`, or this mam's path after --absolute."""
    return _ABSOLUTE[0] if _ABSOLUTE else PROGRAM


def programs() -> tuple[str, ...]:
    """The programs a hook of mam's may run: `mam`, and this mam by its path (so uninstall finds an --absolute
    install without being told). A mam by another path is the user's own hook."""
    path = running_mam()
    return (PROGRAM, path) if path else (PROGRAM,)


def command(state: str, by: str | None = None) -> str:
    """The hook's command line (a shell runs it): the program quoted when it is a path."""
    import shlex

    chosen = by or program()
    return f"{chosen if chosen == PROGRAM else shlex.quote(chosen)} report {state}"


def is_command(text: object, state: str) -> bool:
    return isinstance(text, str) and any(text == command(state, by) for by in programs())


def mam_on_path(env: Mapping[str, str]) -> str | None:
    """The `mam` a hook finds on the PATH of `env` (the agent's, when it is started from here), resolved."""
    import shutil

    found = shutil.which(PROGRAM, path=env.get("PATH", os.defpath))
    return os.path.realpath(found) if found else None


class Unparsable(Exception):
    """The file is not what the kind's settings are (bad JSON or TOML, an unexpected shape): left alone."""


@dataclass(frozen=True)
class Change:
    agent: str
    file: str
    action: str  # installed, uninstalled, unchanged, refused, absent
    message: str
    diff: str | None = None
    state: str | None = None  # status only: installed, partial, absent, unreadable
    details: dict[str, object] | None = None  # status only: what else the kind says of them (Codex: switch, trust)

    def as_json(self) -> dict[str, object]:
        return {"agent": self.agent, "file": self.file, "action": self.action, "state": self.state,
                "message": self.message, "diff": self.diff, "details": self.details}


@dataclass(frozen=True)
class KindFile:
    """One agent kind's hook file, and how mam's entries go in and out of its text."""

    agent: str
    path: Callable[[Mapping[str, str]], Path]
    add: Callable[[str | None], str]  # the file's text (None: no file) with mam's entries, which must be new
    remove: Callable[[str], str | None]  # the text without them (None: nothing would be left: no file)
    count: Callable[[str], tuple[int, int]]  # (mam's entries found, mam's entries a full install has)
    # status only: (words added to its message, details) from the file's text (None: no file) and the environment
    notes: Callable[[str | None, Mapping[str, str]], tuple[str, dict[str, object]]] | None = None
    # uninstall only, where the agent keys its user's choices by a hook's place (Codex's trust): the user's groups
    # that taking mam's out moves up their lists
    moved: Callable[[str], int] | None = None


def home(env: Mapping[str, str]) -> Path:
    value = env.get("HOME")
    if not value:
        raise MamError("operation_failed", "$HOME is not set: the agents' settings files cannot be found")
    return Path(value)


def read(path: Path) -> str | None:
    from mam.util.safefile import read_text

    # the error's code (a FIFO, a folder, too large, not UTF-8): each caller refuses that one file
    return read_text(path, path, MAX_FILE, "operation_failed")


def refuse_link(path: Path) -> None:
    """A settings file that is a symbolic link is never written through nor replaced: refused, naming it. So is
    one whose folder is a link ($CODEX_HOME, ~/.claude): write would refuse it, and --dry-run must say so too."""
    if path.is_symlink():
        raise MamError("operation_failed", f"{path}: the settings file is a symbolic link: refusing to write it",
                       hint="edit the file it points to yourself, or replace the link with a copy")
    if path.parent.is_symlink():
        raise MamError("operation_failed", f"{path.parent}: the settings folder is a symbolic link: refusing to "
                       "write in it", hint="give the folder it points to instead, or edit the file yourself")


def mode_of(path: Path) -> int:
    """The read, write and execute bits of `path` itself (0644 when there is none); never setuid, setgid or
    sticky, which a settings file has no use for and a backup must not copy."""
    try:
        return path.lstat().st_mode & 0o777
    except FileNotFoundError:
        return 0o644


def write(path: Path, text: str | None, mode: int | None = None) -> None:
    """Replace `path` whole with `text` (None: remove it), with `mode`, else keeping its own."""
    from mam.util.safefile import open_folder, replace_in

    if mode is None:
        mode = mode_of(path)
    folder = open_folder(path.parent, "settings folder")  # never a linked folder, to write or to remove in
    try:
        if text is None:
            try:
                os.unlink(path.name, dir_fd=folder)
            except FileNotFoundError:
                pass
        else:
            replace_in(folder, path.name, text.encode(), mode)
    finally:
        os.close(folder)


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def diff(path: Path, old: str | None, new: str | None) -> str:
    lines = difflib.unified_diff((old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True),
                                 fromfile=str(path) if old is not None else "/dev/null",
                                 tofile=str(path) if new is not None else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
