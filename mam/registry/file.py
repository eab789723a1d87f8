"""The agent registry, `.mam/agent-sessions.yaml` (docs/registry.md).

Reading never writes. Writing takes an exclusive lock, re-reads the file, applies a change to the fresh
document, and replaces the file atomically (temporary file, fsync, rename, directory fsync), so a reader
never sees a partial file and two writers never lose each other's change. A file that does not parse or
validate is never rewritten. mam writes one JSON row per line (still YAML), which reads back without the
YAML parser: see mam/registry/text.py.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mam.registry.text as registry_text
from mam.util import quote
from mam.util.errors import MamError
from mam.util.names import NAME_PATTERN
from mam.util.safefile import leads_inside, lock_within, read_text

# The variable that names a registry file outside the workspace (docs/registry.md): its links are followed.
REGISTRY_VARIABLE = "MAM_REGISTRY"

# Deferred imports (inside functions), for start-up: the YAML reader (PyYAML) loads only for a file not in the form
# mam writes.

ACTIVE_STATUSES = frozenset({"starting", "running"})
WRITTEN_STATUSES = ("starting", "running", "stopped", "terminated")  # the words mam writes; a hand edit may add others
SESSIONS = "sessions"
LEGACY_SESSIONS = "herdr_sessions"  # the older herdr-only form: its server key is `herdr_session`
LEGACY_BACKEND = "herdr"
LOCK_TIMEOUT = 30.0
MAX_REGISTRY_BYTES = 256 << 20  # refused unread above this: 10,000 rows are about 2 MB

RowKey = tuple[str, str, str, str]  # (backend, server, name, host); host "" is this machine


def timestamp() -> str:
    """Now, as the registry's timestamps are written: UTC ISO 8601, e.g. 2026-12-02T09:00:00Z."""
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Row:
    """A validated registry row. `raw` is the row's own mapping inside the loaded document."""

    list_key: str
    index: int
    name: str
    backend: str
    server: str
    status: str | None
    agent: str | None
    cwd: str | None
    pane_id: str | None
    raw: dict[str, Any]
    spec: dict[str, Any] | None = None  # how to start it again (docs/registry.md); None for older rows
    agent_session: str | None = None  # the agent's own session id, for resuming its conversation
    host: str | None = None  # the SSH destination of its server; None: this machine

    @property
    def key(self) -> RowKey:
        return (self.backend, self.server, self.name, self.host or "")

    @property
    def server_key(self) -> tuple[str, str, str]:
        """(backend, server, host): the server this row's agent runs on, as mam.servers.fanout asks it."""
        return (self.backend, self.server, self.host or "")

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES


@dataclass
class Registry:
    path: Path
    document: dict[str, Any]
    rows: tuple[Row, ...]
    exists: bool

    def find(self, key: RowKey) -> Row | None:
        return next((row for row in self.rows if row.key == key), None)


class _Invalid(Exception):
    def __init__(self, message: str, list_key: str | None = None, index: int | None = None,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.list_key, self.index, self.field = message, list_key, index, field


def _line_of(text: str, err: _Invalid) -> int | None:
    """Find the line of the offending row (or its field). Only run on the error path: it parses again."""
    import mam.registry.yamlio as yamlio

    path = [step for step in (err.list_key, err.index, err.field) if step is not None]
    return yamlio.line_of(text, path, at_key=err.field is not None)


def _optional_str(row: dict[str, Any], key: str, list_key: str, index: int) -> str | None:
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise _Invalid(f"{key} must be a string, got {type(value).__name__} {quote.shown(value)} (quote it)",
                       list_key, index, key)
    return value


SPEC_STRINGS = ("kind", "command", "cwd", "host")
SPEC_LISTS = ("args", "env_names")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _spec(raw: dict[str, Any], list_key: str, index: int) -> dict[str, Any] | None:
    """A row's launch spec, checked for what restore relies on; keys it does not know are kept, as in rows."""
    spec = raw.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise _Invalid(f"spec must be a mapping like {{kind: claude, args: [], cwd: /repo}}, got {quote.shown(spec)}",
                       list_key, index, "spec")
    for key in SPEC_STRINGS:
        value = spec.get(key)
        if value is not None and not isinstance(value, str):
            raise _Invalid(f"spec.{key} must be a string, got {type(value).__name__} {quote.shown(value)} (quote it)",
                           list_key, index, "spec")
    for key in SPEC_LISTS:
        value = spec.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise _Invalid(f"spec.{key} must be a list of strings, got {quote.shown(value)}", list_key, index, "spec")
    _worktree(spec, list_key, index)
    if spec.get("kind") is not None and spec.get("command") is not None:
        raise _Invalid("spec holds both kind and command: keep one", list_key, index, "spec")
    for name in spec.get("env_names") or ():
        if not ENV_NAME.fullmatch(name):
            raise _Invalid(f"spec.env_names: {quote.shown(name)} is not a variable name", list_key, index, "spec")
    return spec


WORKTREE_STRINGS = ("path", "branch", "base", "repo")


def _worktree(spec: dict[str, Any], list_key: str, index: int) -> None:
    """A spec's `worktree:` (mam spawn --worktree): absolute paths, a branch, a commit, and whether mam made it."""
    worktree = spec.get("worktree")
    if worktree is None:
        return
    if not isinstance(worktree, dict):
        raise _Invalid(f"spec.worktree must be a mapping like {{path: /repo/.mam/worktrees/a, branch: mam/a, ...}}, "
                       f"got {quote.shown(worktree)}", list_key, index, "spec")
    for key in WORKTREE_STRINGS:
        value = worktree.get(key)
        if not isinstance(value, str) or not value or "\0" in value:
            raise _Invalid(f"spec.worktree.{key} must be a string, got {quote.shown(value)}", list_key, index, "spec")
    for key in ("path", "repo"):
        if not worktree[key].startswith("/"):
            raise _Invalid(f"spec.worktree.{key} must be an absolute path, got {quote.shown(worktree[key])}",
                           list_key, index, "spec")
    if not isinstance(worktree.get("made_by_mam"), bool):
        made = worktree.get("made_by_mam")
        raise _Invalid(f"spec.worktree.made_by_mam must be true or false, got {quote.shown(made)}",
                       list_key, index, "spec")


INT_FIELDS = ("restore_count", "exit_status", "exit_signal")  # each a whole number, at least 0, or null
LIST_FIELDS = ("restore_times", "last_output")  # each a list of strings
STR_FIELDS = ("restored_at", "ended_at", "crash_loop_at", "stop_requested_at")


def _history(raw: dict[str, Any], list_key: str, index: int) -> None:
    """The fields of a row's restores and of how its agent last ended (docs/registry.md): checked as restore and
    status rely on them, so a hand edit that breaks one is refused with its line instead of misleading a count."""
    for key in INT_FIELDS:
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise _Invalid(f"{key} must be a whole number, at least 0, got {quote.shown(value)}", list_key, index, key)
    for key in LIST_FIELDS:
        value = raw.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise _Invalid(f"{key} must be a list of strings, got {quote.shown(value)}", list_key, index, key)
    for key in STR_FIELDS:
        _optional_str(raw, key, list_key, index)
    failed = raw.get("spawn_failed")
    if failed is not None and not isinstance(failed, bool):
        raise _Invalid(f"spawn_failed must be true or false, got {quote.shown(failed)}", list_key, index,
                       "spawn_failed")


def _refuse_near_misses(document: dict[str, Any]) -> None:
    """Unknown top-level keys are kept, but one that is a misspelt `sessions:` would hide every row it holds from
    every command, silently: refused, naming the key mam reads."""
    import difflib

    known = (SESSIONS, LEGACY_SESSIONS, "version")
    for key in document:
        if isinstance(key, str) and key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
            if close:
                raise _Invalid(f"unknown top-level key {quote.shown(key)}: did you mean `{close[0]}:`?", None, None,
                               key)


def _refuse_near_miss_status(status: str | None, list_key: str, index: int) -> None:
    """Any word is a status, but one a letter or two from mam's own (`runing`) is a typo that would make an
    active agent look inactive (or the reverse) to every command, silently: refused, naming the word meant. A
    word that holds one of mam's (`restarting`) is a word of its own."""
    if status is None or status in WRITTEN_STATUSES or any(word in status for word in WRITTEN_STATUSES):
        return
    from mam.util.names import closest

    close = closest(status.lower(), WRITTEN_STATUSES, cutoff=0.8)  # `Running` is no active status either
    if close is not None:
        raise _Invalid(f"status {quote.shown(status)} is not one of mam's ({', '.join(WRITTEN_STATUSES)}): did you "
                       f"mean `{close}`?", list_key, index, "status")


def _host(raw: dict[str, Any], list_key: str, index: int) -> str | None:
    """The row's `host:` as an SSH destination (mam.util.names.check_host), None for this machine (absent,
    empty or `local`). Checked here, so that no command ever hands ssh a host it would read as an option."""
    host = _optional_str(raw, "host", list_key, index)
    if host is None:
        return None
    from mam.util.names import LOCAL, check_host

    try:
        checked = check_host(host)
    except MamError as exc:
        raise _Invalid(exc.message, list_key, index, "host") from None
    return None if checked == LOCAL else checked


def _validate(document: Any, default_backend: str) -> tuple[dict[str, Any], tuple[Row, ...]]:
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise _Invalid("the top level must be a mapping with a `sessions:` list")
    version = document.get("version", 1)
    if version != 1:
        raise _Invalid(f"unsupported registry version {quote.shown(version)} (this mam reads version 1)")
    _refuse_near_misses(document)
    rows: list[Row] = []
    seen: dict[RowKey, str] = {}
    for list_key in (SESSIONS, LEGACY_SESSIONS):
        entries = document.get(list_key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise _Invalid(f"`{list_key}:` must be a list of rows", list_key)
        server_key = "herdr_session" if list_key == LEGACY_SESSIONS else "server"
        for index, raw in enumerate(entries):
            if not isinstance(raw, dict):
                raise _Invalid(f"{list_key}[{index}] must be a mapping, got {type(raw).__name__}", list_key, index)
            name = raw.get("name")
            if name is None:
                raise _Invalid(f"{list_key}[{index}] has no `name`", list_key, index)
            if not isinstance(name, str):
                raise _Invalid(f"name must be a string, got {type(name).__name__} {quote.shown(name)} (quote it)",
                               list_key, index, "name")
            if not NAME_PATTERN.fullmatch(name):
                raise _Invalid(f"invalid name {quote.shown(name)}", list_key, index, "name")
            server = raw.get(server_key)
            if server is None:
                raise _Invalid(f"row {name!r} has no `{server_key}`", list_key, index)
            if not isinstance(server, str):
                raise _Invalid(f"{server_key} must be a string, got {type(server).__name__} {quote.shown(server)}",
                               list_key, index, server_key)
            if not NAME_PATTERN.fullmatch(server):
                raise _Invalid(f"invalid {server_key} {quote.shown(server)}", list_key, index, server_key)
            backend = _optional_str(raw, "backend", list_key, index)
            if list_key == LEGACY_SESSIONS:
                if backend not in (None, LEGACY_BACKEND):
                    raise _Invalid(f"rows under `{LEGACY_SESSIONS}:` are herdr rows; move {name!r} to `sessions:`",
                                   list_key, index, "backend")
                backend = LEGACY_BACKEND
            elif backend is None:
                backend = default_backend
            elif not NAME_PATTERN.fullmatch(backend):
                raise _Invalid(f"invalid backend {quote.shown(backend)}", list_key, index, "backend")
            status = _optional_str(raw, "status", list_key, index)
            _refuse_near_miss_status(status, list_key, index)
            agent = _optional_str(raw, "agent", list_key, index)
            pane = raw.get("pane")
            if pane is not None and not isinstance(pane, dict):
                raise _Invalid(f"pane must be a mapping like {{cwd: /repo, id: \"w1:p2\"}}, got {quote.shown(pane)}",
                               list_key, index, "pane")
            pane = pane or {}
            cwd, pane_id = pane.get("cwd"), pane.get("id")
            spec = _spec(raw, list_key, index)
            agent_session = _optional_str(raw, "agent_session", list_key, index)
            _history(raw, list_key, index)
            host = _host(raw, list_key, index)
            key = (backend, server, name, host or "")
            if key in seen:
                where = f" on host {host}" if host else ""
                raise _Invalid(f"duplicate name {name!r} on {backend} server {server!r}{where} (first in "
                               f"{seen[key]})", list_key, index, "name")
            seen[key] = f"{list_key}[{index}]"
            rows.append(Row(list_key, index, name, backend, server, status, agent,
                            None if cwd is None else str(cwd), None if pane_id is None else str(pane_id), raw,
                            spec, agent_session, host))
    return document, tuple(rows)


_HAND_FIX = "fix the file by hand; mam never rewrites a registry it cannot read"


def parse(text: str, path: Path, default_backend: str) -> tuple[dict[str, Any], tuple[Row, ...]]:
    """Parse and validate registry text; raise `invalid_registry` naming the file and line."""
    import mam.registry.yamlio as yamlio  # only for files not in the form mam writes (mam/registry/text.py)

    document = yamlio.load_or_refuse(text, path, "invalid_registry", _HAND_FIX)
    try:
        return _validate(document, default_backend)
    except _Invalid as err:
        raise yamlio.refusal("invalid_registry", path, _line_of(text, err), err.message, _HAND_FIX) from None


def _read(path: Path, default_backend: str, shown: Path | None = None) -> tuple[dict[str, Any], tuple[Row, ...]] | None:
    """The validated document, or None when there is no file. Messages name `shown` (the path the user
    knows) when mam reads it through the link's target."""
    shown = shown or path
    # Only a regular file is read: a FIFO would block.
    text = read_text(path, shown, MAX_REGISTRY_BYTES, "invalid_registry", _HAND_FIX)
    if text is None:
        return None
    document = registry_text.fast_load(text)  # a file as mam writes it, without the YAML parser
    if document is not None:
        try:
            return _validate(document, default_backend)
        except _Invalid:
            pass  # parse it as YAML, which can name the line
    return parse(text, shown, default_backend)


def _confine(path: Path, within: Path | None) -> None:
    """Refuse a registry that a symbolic link (the file itself, `.mam`, or any folder on the way) takes outside
    `within`, the workspace: a clone can carry such a link, and mam would otherwise write the file it points
    at (a dangling one created) and act on rows it never wrote. `within` None: the user named the file
    ($MAM_REGISTRY), so every link is followed. Reading is refused as writing is, so that no command closes or
    restores what such rows name."""
    if within is None:
        return
    if leads_inside(path, within):
        return
    target = quote.shown(os.path.realpath(path), 200, quote="repr", cut="inside")
    raise MamError("invalid_registry", f"{path}: a symbolic link leading outside the workspace (to {target}): "
                   "mam neither reads nor writes through it",
                   hint=f"remove the link; to share a registry on purpose, name it: {REGISTRY_VARIABLE}=PATH")


def load(path: Path, default_backend: str, within: Path | None = None) -> Registry:
    """Read the registry. A missing file is an empty registry. `within`: the workspace a link may not lead out
    of (`_confine`)."""
    _confine(path, within)
    found = _read(path, default_backend)
    if found is None:
        return Registry(path, {}, (), exists=False)
    return Registry(path, found[0], found[1], exists=True)


def _write_target(path: Path) -> Path:
    """The file a write replaces. A symlinked registry (say, one file shared by several checkouts) is resolved
    once, and its target locked and replaced: the link stays a link, and every link to the file shares the
    target's lock."""
    if not path.is_symlink():
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(path))  # a dangling link: the first write creates what it points at
    except OSError as exc:  # a loop
        raise MamError("operation_failed", f"{path}: cannot follow the link: {exc.strerror}",
                       hint="point the link at a file, or replace it with the file") from None


@contextmanager
def _locked(path: Path, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """An exclusive lock on a sibling file: the registry itself is replaced by rename, so it cannot hold one.
    A lock held by a dead process is released by the kernel. A planted link in its place is not followed."""
    lock_path = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        link = exc.errno == errno.ELOOP
        raise MamError("operation_failed", f"{lock_path}: cannot open the registry lock: "
                       f"{'it is a symbolic link' if link else exc.strerror}",
                       hint="remove it: mam creates its lock itself" if link else None) from None
    try:
        try:
            locked = lock_within(fd, timeout)
        except OSError:
            locked = False
        if not locked:
            raise MamError("operation_failed", f"{path}: registry is locked by another process",
                           hint="retry when the other mam command has finished")
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _refuse_read_only(path: Path, shown: Path) -> None:
    """A registry without write permission is one somebody meant to freeze: replacing it by rename would
    succeed (that needs only the folder's permission), so say no instead."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise MamError("operation_failed", f"{shown}: cannot write the registry: {exc.strerror}") from None
    if not mode & 0o222 or not os.access(path, os.W_OK):
        raise MamError("operation_failed", f"{shown}: the registry is read-only (mode {mode & 0o777:04o}): "
                       "refusing to replace it", hint=f"chmod u+w {shown} if mam may update it")


def _write_atomically(path: Path, text: str, shown: Path) -> None:
    import tempfile
    directory = path.parent
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o644
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise MamError("operation_failed", f"{shown}: cannot write the registry: {exc.strerror or exc}",
                           hint="the registry was left as it was") from None
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _remove_stale_temporaries(path: Path) -> None:
    """Temporary files are only written under the lock, so any found while holding it were left by a writer
    that was killed mid-write. They were never renamed into place: remove them."""
    for stale in path.parent.glob("." + path.name + ".*.tmp"):
        try:
            stale.unlink()
        except OSError:
            pass


Change = Callable[[dict[str, Any], tuple[Row, ...]], bool]


def update(path: Path, default_backend: str, change: Change, within: Path | None = None) -> Registry:
    """Apply `change` to the freshly read document under the lock, and write it if `change` returns True.

    `change` mutates the document (rows' `raw` mappings belong to it); the result is validated before it is
    written, so a change can never leave an invalid file behind. `within`: as for `load`, checked before
    anything (the folder, the lock, a temporary file) is made.
    """
    _confine(path, within)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MamError("operation_failed", f"{path.parent}: cannot create: {exc.strerror}") from None
    target = _write_target(path)
    with _locked(target):
        _remove_stale_temporaries(target)
        found = _read(target, default_backend, shown=path)
        document, rows = found if found is not None else ({}, ())
        if not change(document, rows):
            return Registry(path, document, rows, exists=found is not None)
        if "version" not in document:
            document = {"version": 1, **document}
        try:  # validate the changed document itself: a change can never leave an invalid file behind
            document, rows = _validate(document, default_backend)
        except _Invalid as err:
            import mam.registry.yamlio as yamlio
            raise MamError("invalid_registry", f"{path}: refusing to write: {yamlio.cap(err.message)}") from None
        _refuse_read_only(target, path)
        _write_atomically(target, registry_text.dump(document), path)
        return Registry(path, document, rows, exists=True)
