"""Which host a command means: `--host` checked, `$MAM_HOST` as its default, and the key the servers hold it by."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mam.servers.app import App

# Deferred imports (inside functions), for start-up: the name rules load only when a host is given.


def checked_host(host: str | None) -> str | None:
    """--host as given (validated: exit 2 for anything ssh could read as an option), "local" for this machine."""
    if host is None:
        return None
    from mam.util.names import check_host

    return check_host(host)


def host_key(host: str | None) -> str:
    """A checked host as the servers' keys hold it: "" for this machine (mam.calls.transport.is_local)."""
    if not host:
        return ""
    from mam.util.names import is_local

    return "" if is_local(host) else host


def chosen_host(app: App, host: str | None) -> str:
    """The host a command acts on, as a key: `host` when given, else $MAM_HOST (unset or empty: this machine)."""
    return host_key(checked_host(host if host is not None else app.env.get("MAM_HOST") or None))
