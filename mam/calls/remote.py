"""The route of a command's backend calls to another host: which transport, and what the remote side must lose.

A server on another host is a server whose backend commands run over ssh (mam.calls.route.Route); nothing here knows
any backend. The remote side gets the remote login's environment, never the caller's: so that no marker there
can steer a server, every variable pattern the local scrub removes is unset there too, and `$MAM_SSH_ENV` is set.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mam.calls.route import Route
from mam.util.errors import MamError

if TYPE_CHECKING:
    from mam.config.workspace import Workspace
    from mam.plugin.envscrub import KeepRule
    from mam.plugin.manager import Plugins
    from mam.plugin.records import ScrubRule

# Deferred imports (inside functions), for start-up: the ssh transport and the scrub rules load only for a command
# that reaches another host.

SSH_CONFIG_VAR = "MAM_SSH_CONFIG"  # an ssh_config file passed as `-F` (else ssh reads the user's own)
SSH_ENV_VAR = "MAM_SSH_ENV"  # NAME=VALUE words set on the remote side of every call
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class AppLike(Protocol):
    """What a route needs of a command's context (mam.servers.app.App has all of it)."""

    @property
    def workspace(self) -> Workspace: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def timeout(self) -> float: ...
    @property
    def plugins(self) -> Plugins: ...
    def scrub_rules(self, all_plugins: bool = True) -> tuple[list[ScrubRule], tuple[KeepRule, ...]]: ...


def parse_ssh_env(raw: str | None, var: str = SSH_ENV_VAR) -> dict[str, str]:
    """`NAME=VALUE NAME2=VALUE2` (words split at whitespace; a value holds no whitespace) as a mapping. A word
    without '=' or with an invalid name is a usage error."""
    out: dict[str, str] = {}
    for word in (raw or "").split():
        name, eq, value = word.partition("=")
        if not eq or not _NAME.fullmatch(name):
            raise MamError("usage", f"${var}: {word!r} is not NAME=VALUE with a variable name",
                           hint=f'e.g. {var}="TMUX_TMPDIR=/run/user/1000/mam"')
        out[name] = value
    return out


def ssh_config(env: Mapping[str, str]) -> Path | None:
    raw = env.get(SSH_CONFIG_VAR)
    if not raw:
        return None
    path = Path(raw)
    if not path.is_file():
        raise MamError("usage", f"${SSH_CONFIG_VAR}={raw}: not a file")
    return path


def unset_patterns(scrub: Iterable[ScrubRule], keep: Iterable[KeepRule]) -> tuple[str, ...]:
    """The scrub's patterns, less those a keep rule keeps whole (a workspace's keep only where it may keep:
    mam.plugin.envscrub.may_keep). A pattern is unset on the remote side whatever the value (a rule restricted to
    values, like AGENT's, is unset by name there), and a PREFIX_* pattern also takes the names of that prefix a
    narrower keep rule would keep: the remote side holds no caller's value to keep, only the remote login's."""
    from mam.plugin.envscrub import matches, may_keep

    keep = tuple(keep)
    out: list[str] = []
    for rule in scrub:
        pattern = rule.pattern
        keeps = [k.pattern for k in keep if may_keep(k, rule, pattern)]
        if pattern.endswith("*"):
            whole = any(k.endswith("*") and pattern.startswith(k[:-1]) for k in keeps)
        else:
            whole = any(matches(k, pattern) for k in keeps)
        if not whole and pattern not in out and _NAME.fullmatch(pattern.rstrip("*")):
            out.append(pattern)
    return tuple(out)


def build_route(app: AppLike, host: str) -> Route | None:
    """The route to `host` (None for this machine): check_host first (exit 2 for anything ssh could read as an
    option), shared connections under <workspace>/.mam/ssh, ssh's connect timeout from $MAM_TIMEOUT."""
    from mam.calls.transport import SshTransport
    from mam.plugin.envscrub import ALWAYS_REMOVED
    from mam.util.names import check_host, is_local

    host = check_host(host)
    if is_local(host):
        return None
    env_set = parse_ssh_env(app.env.get(SSH_ENV_VAR))
    scrub, keep = app.scrub_rules(True)
    dot_mam = app.workspace.dot_mam
    dot_mam.mkdir(exist_ok=True)  # the workspace's own folder; the ssh folder itself is checked by the transport
    transport = SshTransport(host, dot_mam / "ssh", app.timeout, ssh_config=ssh_config(app.env))
    # A variable set there is not unset again: $MAM_SSH_ENV names what the user wants there.
    unset = tuple(p for p in unset_patterns(scrub, keep) if p not in env_set)
    unset += (ALWAYS_REMOVED.pattern,)  # as here: no keep rule brings a shim's guard back
    return Route(transport, unset, env_set)


class Routes:
    """One route per host for one command: every call to a host shares its transport (and its checks)."""

    def __init__(self, app: AppLike) -> None:
        self.app = app
        self._routes: dict[str, Route | None] = {}

    def get(self, host: str | None) -> Route | None:
        key = host or ""
        if key not in self._routes:
            self._routes[key] = build_route(self.app, key)
        return self._routes[key]
