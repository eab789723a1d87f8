"""Who did what to which agent: `record` appends one line per action to `.mam/audit.jsonl` (docs/trust.md, "The
audit trail"), `audited` records a command's call with its outcome, `read` gives the lines back.

A line is written whole with one write(2) on a descriptor opened O_APPEND, at most LINE_LIMIT bytes, so lines of
concurrent writers never tear or interleave; the file is renamed to `audit.jsonl.1` (and so on, KEEP files) at
ROTATE_AT bytes, under a lock. Neither `.mam` nor the file is followed when it is a symbolic link. A line that
cannot be written fails nothing: it is said on stderr."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import functools
import hashlib
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mam.util.errors import MamError

NAME = "audit.jsonl"
LOCK = ".audit.lock"
LINE_LIMIT = 4096  # bytes, newline included: one write(2) of a regular file's O_APPEND is whole at this size
ROTATE_AT = 10 * 1024 * 1024  # bytes: audit.jsonl becomes audit.jsonl.1 (.1 becomes .2, ...)
KEEP = 3  # rotated files kept
ENV_KEYS = frozenset({"env_names", "env"})  # --env: a value is never written, only KEY=***
TEXT_KEYS = frozenset({"text"})  # typed text: never written, only its length and a hash prefix
CUT = 200  # characters kept of any other string argument
FACES = ("cli", "top", "serve", "skill")


@dataclass(frozen=True)
class Actor:
    """Who acts: the face (cli, top, serve, skill), the OS user, and for `mam serve` the client's address and
    the token's id (a hash prefix, never the token)."""

    face: str
    user: str
    client: str | None = None
    token_id: str | None = None


def os_user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        try:
            import getpass

            return getpass.getuser()
        except Exception:  # no name for this uid: its number
            return str(os.getuid())


_ACTOR: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("mam_actor", default=None)


def current_actor() -> Actor:
    """The actor set by `acting`, else the CLI's (or a skill's, when its script set MAM_FACE=skill)."""
    actor = _ACTOR.get()
    if actor is not None:
        return actor
    return Actor("skill" if os.environ.get("MAM_FACE") == "skill" else "cli", os_user())


@contextlib.contextmanager
def acting(actor: Actor) -> Iterator[None]:
    token = _ACTOR.set(actor)
    try:
        yield
    finally:
        _ACTOR.reset(token)


def masked(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as the line keeps them: typed text as its length and a hash prefix; long strings cut;
    callables and objects left out."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if key in TEXT_KEYS and isinstance(value, str):
            digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            out[key] = {"chars": len(value), "sha256": digest}
        elif isinstance(value, str):
            out[key] = value[:CUT] + ("..." if len(value) > CUT else "")
        elif value is None or isinstance(value, bool | int | float):
            out[key] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            if key in ENV_KEYS:  # --env NAME; a NAME=VALUE given by mistake keeps its name only
                value = [v.split("=", 1)[0] + "=***" if "=" in v else v for v in value]
            out[key] = [v[:CUT] for v in value[:20]] + (["..."] if len(value) > 20 else [])
    return out


def line_of(actor: Actor, action: str, agent: str | None, arguments: Mapping[str, Any], result: str,
            exit_code: int, message: str, now: float | None = None) -> bytes:
    """One line of the trail, at most LINE_LIMIT bytes (the arguments, then the message, give way first)."""
    now = time.time() if now is None else now
    entry: dict[str, Any] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "time": round(now, 3), "user": actor.user,
        "face": actor.face, "client": actor.client, "token_id": actor.token_id, "action": action,
        "agent": agent, "arguments": masked(arguments), "result": result, "exit": exit_code,
        "message": message.splitlines()[0][:500] if message else ""}
    data = (json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")
    if len(data) > LINE_LIMIT:
        entry["arguments"], entry["message"] = {"cut": True}, entry["message"][:200]
        entry["agent"] = agent[:200] if agent else agent
        data = (json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")
    return data


def _open_dot_mam(dot_mam: Path) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(dot_mam, flags)
    except FileNotFoundError:
        os.makedirs(dot_mam, exist_ok=True)
        return os.open(dot_mam, flags)


def _rotate(dot: int) -> None:
    """audit.jsonl -> .1 -> .2 ... (KEEP kept), under the lock, once: another writer may have rotated first."""
    lock = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dot)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if os.stat(NAME, dir_fd=dot, follow_symlinks=False).st_size < ROTATE_AT:
                return
        except FileNotFoundError:
            return
        for n in range(KEEP - 1, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{NAME}.{n}", f"{NAME}.{n + 1}", src_dir_fd=dot, dst_dir_fd=dot)
        os.rename(NAME, f"{NAME}.1", src_dir_fd=dot, dst_dir_fd=dot)
    finally:
        os.close(lock)


def append(dot_mam: Path, data: bytes) -> None:
    """`data` (one line) at the end of DOT_MAM/audit.jsonl, rotated first when it has grown to ROTATE_AT."""
    dot = _open_dot_mam(dot_mam)
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(NAME, flags, 0o600, dir_fd=dot)
        try:
            if os.fstat(fd).st_size >= ROTATE_AT:
                os.close(fd)
                fd = -1
                _rotate(dot)
                fd = os.open(NAME, flags, 0o600, dir_fd=dot)
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.EIO, f"wrote {written} of {len(data)} bytes")
        finally:
            if fd >= 0:
                os.close(fd)
    finally:
        os.close(dot)


RESULTS = ("ok", "refused", "failed")


def record(mam_dir: Path, action: str, agent: str | None, arguments: Mapping[str, Any],
           result: str | Mapping[str, Any], exit_code: int = 0, message: str = "") -> None:
    """Append the action's line to MAM_DIR/audit.jsonl (MAM_DIR: the workspace's `.mam`), as the current actor's.
    `result` is ok, refused or failed (then `exit_code` and a one-line `message`), or a mapping of them:
    {"result": "failed", "exit": 1, "message": "..."}. A line that cannot be written fails nothing: it is said in
    one line on stderr."""
    try:
        if not isinstance(result, str):
            exit_code = int(result.get("exit", exit_code) or 0)
            message = str(result.get("message", message) or "")
            result = str(result.get("result", "ok"))
        append(mam_dir, line_of(current_actor(), action, agent, arguments, result, exit_code, message))
    except Exception as exc:  # the trail never fails the action it records
        why = exc.message if isinstance(exc, MamError) else (
            (exc.strerror or str(exc)) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}")
        if isinstance(exc, OSError) and exc.errno in (errno.ELOOP, errno.ENOTDIR):
            why = "a symbolic link is in its place: not followed"
        sys.stderr.write(f"mam: warning: the audit line for {action} was not written to {mam_dir / NAME}: "
                         f"{why}\n")


F = TypeVar("F", bound=Callable[..., Any])


def audited(action: str, agent: Callable[[Mapping[str, Any]], str | None] | None = None,
            unless: str | None = None, only_if: str | None = None) -> Callable[[F], F]:
    """Record each call of a command's document function (its first argument the App): its arguments, and ok
    with the document's message, or the MamError's code, exit code and message (then raised on). `agent` picks
    the agent from the bound arguments (default: `name`); `unless` names a flag that makes the call change
    nothing (dry_run), `only_if` one without which it changes nothing (reconcile's apply): then no line."""
    def wrap(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind_partial(*args, **kwargs).arguments
            if (unless is not None and bound.get(unless)) or (only_if is not None and not bound.get(only_if)):
                return function(*args, **kwargs)
            app = args[0] if args else kwargs["app"]
            who = agent(bound) if agent is not None else bound.get("name")
            arguments = {k: v for k, v in bound.items() if k not in ("app", "name")}
            try:
                doc = function(*args, **kwargs)
            except MamError as exc:
                record(app.workspace.dot_mam, action, who, arguments,
                       "refused" if exc.exit_code == 2 else "failed", exc.exit_code, exc.message)
                raise
            said = doc.get("message") if isinstance(doc, dict) else None
            record(app.workspace.dot_mam, action, who, arguments, "ok", 0, str(said or ""))
            return doc
        return run  # type: ignore[return-value]
    return wrap


def read(dot_mam: Path, limit: int = 4 * 1024 * 1024) -> tuple[list[dict[str, Any]], int]:
    """The trail's lines (the rotated file first, then the current one, each at most its last `limit` bytes),
    and how many lines were skipped: torn, foreign or not an object."""
    from mam.util.safefile import read_regular  # start-up: only `mam audit` reads the trail

    lines: list[dict[str, Any]] = []
    skipped = 0
    for name in (f"{NAME}.1", NAME):
        path = dot_mam / name
        raw = read_regular(path, path, 64 * 1024 * 1024, "operation_failed")
        if raw is None:
            continue
        for text in raw[-limit:].decode("utf-8", "replace").splitlines():
            try:
                entry = json.loads(text)
            except ValueError:
                skipped += 1
                continue
            if isinstance(entry, dict) and isinstance(entry.get("action"), str):
                lines.append(entry)
            else:
                skipped += 1
    return lines, skipped
