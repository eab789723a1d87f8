"""The plugin manager: built-in plugins, guarded entry-point loading, and the backends they declare.

One broken third-party plugin never takes the CLI down: its failure is recorded and reported by
`mam backends`, and it is an error only for a command that selects that very backend.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pluggy

from mam.plugin import spec as hookspecs
from mam.plugin.builtin import CORE_PLUGIN, CoreDefaults, optional_operation, process_classification
from mam.plugin.helpers import first_line
from mam.plugin.listing import ACTIVE_HOOKS
from mam.plugin.records import (
    OPERATIONS,
    Agent,
    AgentState,
    Backend,
    BackendSpec,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    Failure,
    PaneCapture,
    Remains,
    ScrubRule,
    SendResult,
    ServerError,
    SpawnRequest,
    SpawnResult,
    StopResult,
)
from mam.util.errors import MamError
from mam.util.names import is_valid_name
from mam.util.quote import shown

if TYPE_CHECKING:
    from mam.plugin.entrypoints import EntryPoint

ENTRY_POINT_GROUP = "mam.backends"
BUILTIN_PLUGINS = ("mam_herdr.plugin",)  # herdr ships with mam and is the default backend


@dataclass(frozen=True)
class LoadProblem:
    plugin: str  # entry point or module name
    provider: str  # the distribution and version it came from
    error: str  # the first line of the error


@dataclass(frozen=True)
class HookPlugin:
    """A loaded plugin that declares no backend (a classifier, a wrapper), for `mam backends`."""

    name: str
    provider: str
    hooks: tuple[str, ...]  # the hooks it implements, sorted


def _first_line(exc: BaseException) -> str:
    """`Type: message`, its first line as it stands (the type's name keeps it from being blank)."""
    return first_line(f"{type(exc).__name__}: {exc}", strip=False)


_HOOK_OF = {"spawn": "mam_spawn_agent", "stop": "mam_stop_agent", "send_text": "mam_send_text",
            "client_argv": "mam_client_argv"}


def _hook_api_problem(plugin: Any) -> str | None:
    """A plugin may say which hook API it needs (`NEEDS_HOOK_API = 3`): a mam older than that is a load problem
    that says so, instead of hooks that are silently never called."""
    needed = getattr(plugin, "NEEDS_HOOK_API", None)
    if needed is None:
        return None
    if not isinstance(needed, int) or isinstance(needed, bool) or needed < 1:
        return f"NEEDS_HOOK_API must be a whole number of at least 1, not {repr(needed)[:80]}"
    if needed > hookspecs.HOOK_API:
        return f"needs mam hook API {needed}, and this mam has hook API {hookspecs.HOOK_API}: upgrade mam"
    return None


def _names_in(env: Mapping[str, str], var: str) -> set[str]:
    return {p.strip() for p in env.get(var, "").split(",") if p.strip()}


def _deselected_by(name: str, env: Mapping[str, str]) -> str | None:
    """The variable that keeps entry point `name` from loading: MAM_LOAD_PLUGINS is an allow list (set but
    empty: built-ins only), MAM_DISABLE_PLUGINS a block list."""
    if "MAM_LOAD_PLUGINS" in env and name not in _names_in(env, "MAM_LOAD_PLUGINS"):
        return "MAM_LOAD_PLUGINS"
    if name in _names_in(env, "MAM_DISABLE_PLUGINS"):
        return "MAM_DISABLE_PLUGINS"
    return None


def _selected(name: str, env: Mapping[str, str]) -> bool:
    return _deselected_by(name, env) is None


def marker_rules(specs: Iterable[BackendSpec]) -> list[ScrubRule]:
    """A backend's markers, declared once in its BackendSpec, as the scrub rules every server and agent mam
    starts gets, and every backend process runs with: no server can steer another's."""
    return [ScrubRule(marker, f"backend {spec.name}") for spec in specs for marker in spec.markers]


class Plugins:
    """A typed facade over pluggy for the core. Entry points are read only when a command needs them."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.pm = pluggy.PluginManager("mam")
        self.pm.add_hookspecs(hookspecs)
        self.problems: list[LoadProblem] = []
        self._specs: dict[str, BackendSpec] = {}
        self._backends: dict[str, Backend] = {}
        self._entry_point_cache: dict[str, EntryPoint] | None = None
        self._deselected: dict[str, str] = {}  # entry point name -> the variable that keeps it out
        self._loaded: set[str] = set()
        self._providers: dict[str, str] = {}  # registered plugin name -> where it came from
        if env.get("MAM_TRACE_PLUGINS") == "1":
            self._trace()
        self._register(CoreDefaults(), CORE_PLUGIN, "mam (built in)")
        for module_name in BUILTIN_PLUGINS:
            self._register(importlib.import_module(module_name), module_name, "mam (built in)")

    def _trace(self) -> None:
        """MAM_TRACE_PLUGINS=1: one line on stderr per hook call: the hook, the backend it was called for, the
        plugins that implement it (in calling order) and how long the call took. Listings run in parallel
        threads and hooks nest (stop lists), so each thread keeps its own stack of start times."""
        started = threading.local()

        def before(hook_name: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
            started.__dict__.setdefault("stack", []).append(time.monotonic())

        def after(outcome: Any, hook_name: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
            elapsed = time.monotonic() - started.stack.pop()
            backend = getattr(kwargs.get("backend"), "name", None)
            who = ",".join(impl.plugin_name for impl in reversed(impls))
            sys.stderr.write(f"mam: trace {hook_name}" + (f" backend={backend}" if backend else "")
                             + f" plugins={who} {elapsed * 1000:.1f}ms\n")

        self.pm.add_hookcall_monitoring(before, after)

    def _register(self, plugin: Any, name: str, provider: str) -> None:
        too_old = _hook_api_problem(plugin)
        if too_old is not None:  # registered, its hooks would run against a set they were not written for
            self.problems.append(LoadProblem(name, provider, too_old))
            return
        try:
            self.pm.register(plugin, name=name)
            self.pm.check_pending()  # a misspelled hook is an error, not a silently ignored function
            declared = self._declared_by(plugin)
        except Exception as exc:  # a broken plugin is reported, never fatal
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            self.problems.append(LoadProblem(name, provider, _first_line(exc)))
            return
        self._providers[name] = provider
        for spec in declared:
            if not is_valid_name(spec.name):  # --backend could never select it
                said = shown(spec.name, quote="repr", cut="value")
                self.problems.append(LoadProblem(name, provider, f"backend name {said} is not a name "
                                                 "--backend can select (1-64 letters, digits, '.', '_' or '-', "
                                                 "starting with a letter or digit)"))
                continue
            unknown = sorted(set(spec.operations or ()) - OPERATIONS.keys())
            if unknown:  # a misspelled operation would never be tested, nor said to be left out
                self.problems.append(LoadProblem(name, provider, f"backend {spec.name!r} declares unknown operations "
                                                 f"{', '.join(shown(op, quote='repr', cut='value') for op in unknown)} "
                                                 f"(known: {', '.join(OPERATIONS)})"))
                continue
            if spec.name in self._specs:
                other = self._specs[spec.name].provider
                self.problems.append(LoadProblem(
                    name, provider, f"backend name {spec.name!r} is declared by both {other} and {provider}"))
                continue
            self._specs[spec.name] = replace(spec, provider=provider)

    def hook_plugins(self) -> list[HookPlugin]:
        """The loaded plugins that declare no backend, with the hooks each implements (after read_entry_points)."""
        found = []
        for name, plugin in self.pm.list_name_plugin():
            if name == CORE_PLUGIN or plugin is None or self._declared_by(plugin) or name not in self._providers:
                continue
            hooks = tuple(sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or ()))
            found.append(HookPlugin(name, self._providers[name], hooks))
        return sorted(found, key=lambda p: p.name)

    @staticmethod
    def _declared_by(plugin: Any) -> list[BackendSpec]:
        hook = getattr(plugin, "mam_backends", None)
        if hook is None:
            return []
        specs = hook()
        if not isinstance(specs, list | tuple) or not all(isinstance(s, BackendSpec) for s in specs):
            raise TypeError("mam_backends() must return a list of BackendSpec")
        return list(specs)

    def _entry_points(self) -> dict[str, EntryPoint]:
        """The `mam.backends` entry points allowed by MAM_LOAD_PLUGINS / MAM_DISABLE_PLUGINS, read by name
        without importing any of them."""
        if self._entry_point_cache is None:
            from mam.plugin.entrypoints import entry_points  # only for commands that need them

            found = entry_points(ENTRY_POINT_GROUP)
            self._entry_point_cache = {ep.name: ep for ep in found if _selected(ep.name, self.env)}
            self._deselected = {ep.name: var for ep in found if (var := _deselected_by(ep.name, self.env))}
            self._report_unknown_names({ep.name for ep in found})
        return self._entry_point_cache

    def _report_unknown_names(self, installed: set[str]) -> None:
        """A name in MAM_LOAD_PLUGINS or MAM_DISABLE_PLUGINS that no plugin has is a typo: `mam backends`
        says so, instead of silently loading (or blocking) something else than the user meant."""
        builtin = {spec.name for spec in self._specs.values()}
        for var in ("MAM_LOAD_PLUGINS", "MAM_DISABLE_PLUGINS"):
            for name in sorted(_names_in(self.env, var) - installed):
                why = (f"{name} is built in and always loaded" if name in builtin else
                       f"no installed plugin is named {name!r} (installed: {', '.join(sorted(installed)) or 'none'})")
                self.problems.append(LoadProblem(var, "environment", f"{var} names {name!r}: {why}"))

    def _load_entry_point(self, name: str) -> None:
        if name in self._loaded:
            return
        self._loaded.add(name)
        ep = self._entry_points().get(name)
        if ep is None:
            return
        provider = ep.provider
        try:
            plugin = ep.load()
        except Exception as exc:  # reported by `mam backends`, fatal only when selected
            self.problems.append(LoadProblem(name, provider, _first_line(exc)))
            return
        self._register(plugin, name, provider)

    def read_entry_points(self) -> None:
        """Load every third-party plugin, each guarded (for `mam backends`, `env` and bootstraps)."""
        for name in sorted(self._entry_points()):
            self._load_entry_point(name)

    def specs(self) -> list[BackendSpec]:
        self.read_entry_points()
        return sorted(self._specs.values(), key=lambda s: s.name)

    def spec(self, name: str) -> BackendSpec:
        """A backend by name. Only the entry point of that name is imported (plugins name their entry point
        after their backend); all of them only when it is not found that way."""
        if name not in self._specs:
            self._load_entry_point(name)
        if name not in self._specs and not any(p.plugin == name for p in self.problems):
            self.read_entry_points()
        if name in self._specs:
            return self._specs[name]
        broken = [p for p in self.problems if p.plugin == name]
        if broken:
            p = broken[0]
            raise MamError("plugin_load_failed", f"backend {name!r} ({p.provider}) failed to load: {p.error}",
                           hint="run 'mam backends' for details, or uninstall the broken plugin")
        if name in self._deselected:
            var = self._deselected[name]
            raise MamError("backend_not_found", f"backend {name!r} is installed but not loaded: ${var}="
                           f"{self.env.get(var, '')} leaves it out", hint=f"change or unset {var}")
        known = ", ".join(sorted(self._specs)) or "none"
        raise MamError("backend_not_found", f"backend {name!r} was not recognized. Choose one of: {known}",
                       hint="install the backend's plugin, or pick another with --backend")

    def backend(self, name: str) -> Backend:
        """The loaded backend object; its working module is imported here, the first time it is needed."""
        if name not in self._backends:
            spec = self.spec(name)
            try:
                self._backends[name] = spec.load()
            except Exception as exc:  # the selected backend: an error, but one line
                raise MamError("plugin_load_failed",
                               f"backend {name!r} ({spec.provider}) failed to load: {_first_line(exc)}",
                               hint="run 'mam backends' for details") from None
        return self._backends[name]

    # The hooks, typed.
    def scrub_rules(self, all_plugins: bool = True) -> list[ScrubRule]:
        """The union of the plugins' rules: of every installed plugin (for a bootstrap), or only of those
        loaded so far (for the client environment of a query, which must not import every plugin)."""
        if all_plugins:
            self.read_entry_points()
        hooked = [rule for rules in reversed(self.pm.hook.mam_env_scrub_rules()) for rule in rules or ()]
        return [*hooked, *marker_rules(self._specs.values())]

    def list_agents(self, backend: Backend, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure:
        result: tuple[Agent, ...] | Failure = self.pm.hook.mam_list_agents(backend=backend, server=server, ctx=ctx)
        return result

    def classify(self, backend: Backend, failure: Failure) -> ServerError:
        """What a failure means. Facts about the process (not on PATH, past its time limit, killed by a signal)
        are settled before any implementation of the hook runs, so no plugin can call those "down"."""
        fact = process_classification(failure)
        if fact is not None:
            return fact
        result: ServerError = self.pm.hook.mam_classify_error(backend=backend, failure=failure)
        return result

    def bootstrap(self, backend: Backend, server: str, ctx: BootstrapContext) -> BootstrapResult:
        result: BootstrapResult = self.pm.hook.mam_bootstrap_server(backend=backend, server=server, ctx=ctx)
        return result

    def spawn(self, backend: Backend, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult:
        result: SpawnResult = self.pm.hook.mam_spawn_agent(backend=backend, server=server, request=request, ctx=ctx)
        return result

    def stop(self, backend: Backend, server: str, name: str, ctx: CallContext, force: bool = False) -> StopResult:
        with self._active():  # find_for_stop lists and classifies through these hooks
            result: StopResult = self.pm.hook.mam_stop_agent(backend=backend, server=server, name=name, ctx=ctx,
                                                             force=force)
        return result

    @contextmanager
    def _active(self) -> Iterator[None]:
        token = ACTIVE_HOOKS.set(self)
        try:
            yield
        finally:
            ACTIVE_HOOKS.reset(token)

    def require(self, backend: Backend, operation: str) -> None:
        """Refuse, before anything starts, an operation (`spawn`, `stop`, `send_text`, `client_argv`) that nothing
        can run: the backend has no such method and no plugin but the core's implements its hook. A plugin that
        implements it may answer for a backend without the method (a wrapper); when it does not, the core's
        own implementation refuses the same way."""
        self.read_entry_points()  # a plugin that declares no backend (a wrapper) is imported for operations too
        hook = getattr(self.pm.hook, _HOOK_OF[operation])
        if any(impl.plugin_name != CORE_PLUGIN for impl in hook.get_hookimpls()):
            return
        optional_operation(backend, operation)

    def client_argv(self, backend: Backend, server: str, args: list[str]) -> list[str] | None:
        self.read_entry_points()  # as for the other operations: every plugin may answer
        result: list[str] | None = self.pm.hook.mam_client_argv(backend=backend, server=server, args=args)
        return result

    def agent_state(self, backend: Backend, server: str, agent: Agent, ctx: CallContext) -> AgentState | None:
        result: AgentState | None = self.pm.hook.mam_agent_state(backend=backend, server=server, agent=agent, ctx=ctx)
        return result

    def capture_panes(self, backend: Backend, server: str, agents: tuple[Agent, ...],
                      ctx: CallContext) -> Mapping[str, PaneCapture] | Failure | None:
        result: Mapping[str, PaneCapture] | Failure | None = self.pm.hook.mam_capture_panes(
            backend=backend, server=server, agents=agents, ctx=ctx)
        return result

    def agent_remains(self, backend: Backend, server: str, names: tuple[str, ...],
                      ctx: CallContext) -> Mapping[str, Remains] | Failure | None:
        result: Mapping[str, Remains] | Failure | None = self.pm.hook.mam_agent_remains(
            backend=backend, server=server, names=names, ctx=ctx)
        return result

    def send_text(self, backend: Backend, server: str, agent: Agent, text: str, enter: bool,
                  ctx: CallContext) -> SendResult:
        result: SendResult = self.pm.hook.mam_send_text(backend=backend, server=server, agent=agent, text=text,
                                                        enter=enter, ctx=ctx)
        return result
