"""Launch specs this user's mam wrote: an HMAC-SHA256 over what restore acts on, under a key only this user reads
(docs/trust.md, "What a registry may make mam do").

A registry can come from a clone or a teammate, and a hand edit can change any field: `mam restore` runs a row's
spec only when its `spec_sig` matches, and asks first otherwise. The key lives outside every workspace
($XDG_CONFIG_HOME/mam/spec.key, else ~/.config/mam/spec.key), made 0600 on the first spawn; a key file that is a
link, another user's, or readable by group or others is refused, never used.

hashlib and hmac are imported inside the functions: only spawn, restore and reconcile --apply pay for them.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mam.util.errors import MamError

FIELD = "spec_sig"  # the row field that holds the signature
PREFIX = "hmac-sha256:"
KEY_BYTES = 32
_KEY_TEXT = KEY_BYTES * 2 + 1  # hex and a newline
_HINT = "delete it and mam makes a new one on the next spawn (rows signed with the old key then ask before they run)"

# What a signature can say about a row: signed (it matches), unsigned (none), mismatch (edited, or another key's),
# no_key (this user has no key yet, so nothing can be checked).
SIGNED, UNSIGNED, MISMATCH, NO_KEY = "signed", "unsigned", "mismatch", "no_key"


# Why a launch spec is put to the user before it runs (mam spawn and mam restore at a terminal, mam top's question).
DOUBTS = {"unsigned": "it carries no signature of your mam", "no_key": "you have no key to check its signature",
          "mismatch": "it is not as your mam signed it (edited, or signed with another user's key)",
          "workspace_resume": "its resume argv holds words from this workspace's .mam/states.yaml, which no "
                              "signature covers",
          "workspace_argv": "its argv holds words from this workspace's .mam/states.yaml, which no signature "
                            "covers",
          "workspace_program": "its program is named by this workspace's .mam/states.yaml (a kind's programs), "
                               "which no signature covers"}
CONSENT_QUESTION = "run it, and sign it as yours?"


def doubt_lines(agent: Mapping[str, Any]) -> list[str]:
    """What the user is shown before a launch spec their mam did not sign runs: why it is in doubt, everything it
    would run and hand over (argv, the argv without the workspace's words, cwd, the variables' names). Not made
    visible: the caller does that for where it shows them."""
    import shlex

    on = f" on {agent['host']}" if agent.get("host") else " on this machine"
    return [f"{agent['name']} ({agent['backend']} server {agent['server']}{on}): its launch spec is not one "
            f"your mam wrote: {DOUBTS.get(agent['spec_trust'], agent['spec_trust'])}",
            f"  argv: {shlex.join(agent['argv'] or [])}",
            *([f"  without the workspace: {shlex.join(agent['argv_without_workspace'])}"]
              if "argv_without_workspace" in agent else []),
            f"  cwd: {agent['cwd']}", f"  env: {', '.join(agent['env_names']) or '(none)'}"]


def key_path(env: Mapping[str, str]) -> Path:
    """$XDG_CONFIG_HOME/mam/spec.key (an absolute XDG_CONFIG_HOME only, as the XDG spec says), else
    ~/.config/mam/spec.key."""
    from mam.config.workspace import user_config_dir  # start-up: only when a spec is signed or checked

    return user_config_dir(env) / "spec.key"


def _refuse(path: Path, why: str) -> MamError:
    return MamError("operation_failed", f"{path}: {why}: refusing to use it as the launch spec key", hint=_HINT)


def _read_key(path: Path) -> bytes | None:
    """The key in `path`, None when there is none; refused when it is a link, not a regular file, not this
    user's, readable or writable by group or others, or not a key mam wrote."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, "it is a symbolic link") from None
        raise _refuse(path, f"cannot read it ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(path, "not a regular file")
        if info.st_uid != os.geteuid():
            raise _refuse(path, f"owned by uid {info.st_uid}, not by you (uid {os.geteuid()})")
        if info.st_mode & 0o077:
            raise _refuse(path, f"mode {stat.S_IMODE(info.st_mode):04o}: group or others can read or write it "
                                "(it must be 0600)")
        data = os.read(fd, _KEY_TEXT + 1)
    except OSError as exc:
        raise _refuse(path, f"cannot read it ({exc.strerror})") from None
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise _refuse(path, "not a key mam wrote (64 hex digits)")
    return key


def _create_key(path: Path) -> None:
    """Write a fresh key at `path`, 0600, atomically and without replacing one that another command made
    meanwhile: written to a private temporary file, then hard-linked into place (link never overwrites)."""
    import secrets

    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise MamError("operation_failed", f"{path}: cannot make the launch spec key: {exc.strerror}") from None
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (secrets.token_bytes(KEY_BYTES).hex() + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, path)
        except FileExistsError:
            pass  # another spawn made it first: that one is the key
    except OSError as exc:
        raise MamError("operation_failed", f"{path}: cannot make the launch spec key: {exc.strerror}") from None
    finally:
        try:
            os.unlink(temp)
        except OSError:
            pass


def load_key(env: Mapping[str, str], create: bool = False) -> bytes | None:
    """This user's key; None when there is none and not `create`. Raises when the file is there but unusable."""
    path = key_path(env)
    key = _read_key(path)
    if key is None and create:
        _create_key(path)
        key = _read_key(path)
    return key


def payload(row: Mapping[str, Any], spec: Mapping[str, Any]) -> bytes:
    """The canonical bytes of everything restore acts on: where it runs (backend, server, host), as what (name,
    agent kind, resumed session) and the launch spec itself. Status, notes and every other field are not in it,
    so a hand edit of those keeps the signature. `row` holds resolved values: name, backend, server, host
    ("" for this machine), agent, agent_session."""
    document: dict[str, Any] = {
        "v": 1,
        "name": row.get("name"), "backend": row.get("backend"), "server": row.get("server"),
        "host": row.get("host") or "", "agent": row.get("agent"), "agent_session": row.get("agent_session"),
        "spec": {"kind": spec.get("kind"), "command": spec.get("command"), "args": list(spec.get("args") or ()),
                 "cwd": spec.get("cwd"), "env_names": list(spec.get("env_names") or ()), "host": spec.get("host")},
    }
    if spec.get("worktree") is not None:  # where restore re-makes a worktree and `worktree remove` acts: signed too
        document["spec"]["worktree"] = spec["worktree"]  # absent: the same bytes as before, old signatures hold
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def sign(key: bytes, row: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    import hashlib
    import hmac

    return PREFIX + hmac.new(key, payload(row, spec), hashlib.sha256).hexdigest()


def verdict(key: bytes | None, signature: object, row: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    """SIGNED, UNSIGNED, MISMATCH or NO_KEY for a row's `spec_sig` value."""
    if not isinstance(signature, str) or not signature:
        return UNSIGNED
    if key is None:
        return NO_KEY
    import hmac

    return SIGNED if hmac.compare_digest(signature, sign(key, row, spec)) else MISMATCH


def row_fields(name: str, backend: str, server: str, host: str | None, agent: str | None,
               agent_session: str | None) -> dict[str, Any]:
    """The row values `payload` signs, by name."""
    return {"name": name, "backend": backend, "server": server, "host": host or "", "agent": agent,
            "agent_session": agent_session}
