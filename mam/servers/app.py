"""One command's context: the workspace, the plugins, the selected backend and the backend environment.

Everything here is backend-agnostic: backends are reached through the plugin hooks only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from mam import registry
from mam.calls import runner
from mam.config import settings
from mam.config.workspace import DEFAULT_BACKEND, Config, Workspace, open_workspace
from mam.plugin import envscrub
from mam.plugin.records import ScrubRule
from mam.util.errors import MamError
from mam.util.names import check_name

if TYPE_CHECKING:  # pluggy is loaded only by commands that reach a backend
    from mam.calls.remote import Routes
    from mam.calls.route import Route
    from mam.kinds.library import Library
    from mam.plugin.manager import Plugins

# Deferred imports (inside functions), for start-up: the plugins, the kind library, routes and shims load only when a
# command first uses them.


START_TIMEOUT_VAR = "MAM_HERDR_START_TIMEOUT"


def check_start_timeout(env: Mapping[str, str]) -> None:
    """$MAM_HERDR_START_TIMEOUT: the seconds herdr's `agent start` may wait for the agent to be ready (its
    `--timeout`), which herdr takes above 3 and at most 300. A bad value is refused by every command, at once."""
    raw = env.get(START_TIMEOUT_VAR)
    if raw is None or raw == "":
        return
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 3 < value <= 300:
        raise MamError("usage", f"${START_TIMEOUT_VAR}={raw}: expected a number of seconds, more than 3 and at "
                       "most 300 (herdr's limits for `agent start --timeout`)")


@dataclass
class App:
    workspace: Workspace
    env: Mapping[str, str]
    backend_flag: str | None  # --backend as given on the command line
    _backend_env: tuple[int, dict[str, str]] | None = field(default=None, init=False, repr=False)
    _routes: Routes | None = field(default=None, init=False, repr=False)

    @classmethod
    def open(cls, workspace: str | None, backend: str | None, env: Mapping[str, str] | None = None) -> App:
        env = dict(os.environ if env is None else env)
        if backend is not None:
            check_name(backend, "backend name")
        app = cls(open_workspace(workspace, env), env, backend)
        app.timeout, app.bootstrap_wait  # noqa: B018 - a bad $MAM_TIMEOUT is refused by every command, at once
        runner.set_max_output(settings.max_output_from_env(env))
        check_start_timeout(env)
        return app

    @property
    def explicit_backend(self) -> str | None:
        """The backend filter of `status`/`reconcile`: --backend, then $MAM_BACKEND; None when neither."""
        value = self.backend_flag or self.env.get("MAM_BACKEND") or None
        if value is not None:
            check_name(value, "backend name")
        return value

    @property
    def backend_name(self) -> str:
        return self.explicit_backend or self.workspace.config.backend or DEFAULT_BACKEND

    @property
    def row_default_backend(self) -> str:
        """A registry row without `backend:` belongs to config `backend:`, else herdr (docs/registry.md)."""
        return self.workspace.config.backend or DEFAULT_BACKEND

    def route(self, host: str | None) -> Route | None:
        """The route of backend calls to `host` over ssh (mam.calls.remote), one per host for this command; None for
        this machine (no host, "" or "local"). A host ssh could read as an option is a usage error."""
        if not host:
            return None
        if self._routes is None:
            from mam.calls.remote import Routes

            self._routes = Routes(self)
        return self._routes.get(host)

    @cached_property
    def kinds(self) -> Library:
        """The agent-kind library with the workspace's .mam/states.yaml, read once per command (a bad file is
        refused, exit 2). `status` loads its own, in a thread beside the listings (mam.agents.agentstate)."""
        from mam.kinds.library import load_library

        return load_library(self.workspace.dot_mam / "states.yaml")

    @cached_property
    def plugins(self) -> Plugins:
        from mam.plugin.manager import Plugins

        return Plugins(self.env)

    @property
    def autostart(self) -> bool:
        """Whether a command may start a server that is down: not with $MAM_NO_AUTOSTART=1."""
        return self.env.get("MAM_NO_AUTOSTART") != "1"

    @cached_property
    def timeout(self) -> float:
        return settings.timeout_from_env(self.env)

    @cached_property
    def bootstrap_wait(self) -> float:
        return settings.timeout_from_env(self.env, "MAM_BOOTSTRAP_TIMEOUT", 10.0)

    @cached_property
    def user_config(self) -> Config:
        """The user's own config ($XDG_CONFIG_HOME/mam/config.yaml), trusted as a workspace's is not."""
        from mam.config.workspace import load_user_config

        return load_user_config(self.env)

    def scrub_rules(self, all_plugins: bool = True) -> tuple[list[ScrubRule], tuple[envscrub.KeepRule, ...]]:
        """The scrub rules (the user's config, the workspace's, then the plugins') and the keep rules (the user's
        config, the workspace's, then mam's defaults), each naming the file it came from."""
        config, user = self.workspace.config, self.user_config
        source, user_source = f"config {config.path}", f"config {user.path}"
        rules = [*(ScrubRule(p, user_source) for p in user.scrub), *(ScrubRule(p, source) for p in config.scrub),
                 *self.plugins.scrub_rules(all_plugins)]
        return rules, envscrub.keep_rules(config.keep, source, user.keep, user_source)

    def scrub_plan(self, all_plugins: bool = True) -> envscrub.ScrubPlan:
        rules, keep = self.scrub_rules(all_plugins)
        plan = envscrub.plan(self.env, rules, keep)
        if "PATH" in plan.env:  # backend processes must find the real binaries, never mam's shims
            from mam.calls.shims import path_without_shims

            plan.env["PATH"] = path_without_shims(plan.env["PATH"])
        return plan

    @cached_property
    def server_plan(self) -> envscrub.ScrubPlan:
        """The scrub of what a server or an agent mam starts gets: the rules of every installed plugin."""
        return self.scrub_plan()

    @property
    def server_env(self) -> dict[str, str]:
        return self.server_plan.env

    @property
    def backend_env(self) -> dict[str, str]:
        """Every backend process runs scrubbed, so no marker can steer it to the wrong server. Built from the
        rules of the plugins loaded so far, and built again once more are loaded: a backend's own markers must
        be gone from its own calls."""
        loaded = len(self.plugins.pm.get_plugins())
        if self._backend_env is None or self._backend_env[0] != loaded:
            self._backend_env = (loaded, self.scrub_plan(all_plugins=False).env)
        return self._backend_env[1]

    def load_registry(self) -> registry.Registry:
        return registry.load(self.workspace.registry_path, self.row_default_backend, self.workspace.registry_within)

    def update_registry(self, change: registry.Change) -> registry.Registry:
        """`registry.update` of this workspace's registry: every command writes it through here."""
        return registry.update(self.workspace.registry_path, self.row_default_backend, change,
                               self.workspace.registry_within)

    def log_path(self, backend: str, server: str) -> Path:
        return self.workspace.logs / f"{backend}-{server}.log"
