"""The core's own hook implementations: delegate to the backend object, and never guess "down"."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from mam.plugin.envscrub import DEFAULT_RULES
from mam.plugin.helpers import first_line
from mam.plugin.records import (
    AGENT_STATES,
    Agent,
    AgentState,
    Backend,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    ErrorKind,
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
from mam.plugin.spec import hookimpl
from mam.util.errors import MamError

CORE_PLUGIN = "mam.plugin.builtin"  # the name the core's own implementations are registered under


def fallback_classification(failure: Failure) -> ServerError:
    """What a failure means when no backend recognised it: never `server_down`."""
    result = failure.result
    program = result.argv[0] if result.argv else failure.backend
    if failure.parse_error is not None and result.returncode == 0:  # a failed exit is an error, not bad output
        return ServerError(ErrorKind.BAD_OUTPUT, f"{program} printed output mam cannot read: {failure.parse_error}")
    detail = first_line(result.stderr)
    if result.returncode is None:
        return ServerError(ErrorKind.UNKNOWN, f"{program} gave no answer" + (f": {detail}" if detail else ""))
    if detail:
        return ServerError(ErrorKind.UNKNOWN, f"{program} exited {result.returncode}: {detail[:300]}")
    return ServerError(ErrorKind.UNKNOWN, f"{program} exited {result.returncode} with no error output")


def process_classification(failure: Failure) -> ServerError | None:
    """Facts about the process itself, which no backend can overrule."""
    result = failure.result
    program = result.argv[0] if result.argv else failure.backend
    if result.transport_error is not None:  # ssh's own failure: the backend's program never answered
        return result.transport_error
    if result.not_found:
        return ServerError(ErrorKind.NOT_INSTALLED, f"{program}: not found on PATH")
    if result.timed_out:
        return ServerError(ErrorKind.TIMEOUT, f"{program} gave no answer within {result.timeout:g} s")
    if result.os_error is not None:
        kind = ErrorKind.PERMISSION if "ermission denied" in result.os_error else ErrorKind.UNKNOWN
        return ServerError(kind, result.os_error)
    if result.returncode is not None and result.returncode < 0:  # whatever it printed before it died
        return ServerError(ErrorKind.UNKNOWN, f"{program} was killed by signal {-result.returncode}")
    return None


_OPERATIONS = {"spawn": "start agents", "stop": "stop agents", "client_argv": "run its own command line",
               "send_text": "type into an agent's pane"}


def optional_operation(backend: Backend, method: str) -> Callable[..., Any]:
    """A backend's optional method (`spawn`, `stop`, `client_argv`, `send_text`), or a clear error when it has
    none. The core's own hook implementations call it, after every plugin's; commands ask `Plugins.require`
    before they start anything, which lets a plugin that implements the hook answer for such a backend."""
    operation = getattr(backend, method, None)
    if operation is None:
        raise MamError("operation_failed", f"backend {backend.name} cannot {_OPERATIONS[method]}",
                       hint="use the multiplexer itself, then `mam reconcile --adopt --apply`")
    return cast(Callable[..., Any], operation)


def takes_force(method: Callable[..., Any]) -> bool:
    """Whether a backend's `stop` takes the `force` keyword of hook API 4."""
    import inspect

    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return "force" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


class CoreDefaults:
    """Registered first, run last: anything a plugin adds runs before these."""

    @hookimpl(trylast=True)
    def mam_list_agents(self, backend: Backend, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure:
        return backend.list_agents(server, ctx)

    @hookimpl(trylast=True)
    def mam_bootstrap_server(self, backend: Backend, server: str, ctx: BootstrapContext) -> BootstrapResult:
        return backend.bootstrap(server, ctx)

    @hookimpl
    def mam_env_scrub_rules(self) -> list[ScrubRule]:
        return list(DEFAULT_RULES)

    @hookimpl(trylast=True)
    def mam_classify_error(self, backend: Backend, failure: Failure) -> ServerError:
        return process_classification(failure) or backend.classify(failure) or fallback_classification(failure)

    @hookimpl(trylast=True)
    def mam_spawn_agent(self, backend: Backend, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult:
        if getattr(backend, "spawn", None) is None:  # a plugin implementing the hook declined: nothing started
            return SpawnResult(False, f"backend {backend.name} cannot {_OPERATIONS['spawn']}")
        result: SpawnResult = optional_operation(backend, "spawn")(server, request, ctx)
        return result

    @hookimpl(trylast=True)
    def mam_stop_agent(self, backend: Backend, server: str, name: str, ctx: CallContext,
                       force: bool = False) -> StopResult:
        stop = optional_operation(backend, "stop")
        # A backend written before hook API 4 takes no `force`: it is asked as before (its own rule stands).
        result: StopResult = stop(server, name, ctx, force=True) if force and takes_force(stop) else \
            stop(server, name, ctx)
        return result

    @hookimpl(trylast=True)
    def mam_client_argv(self, backend: Backend, server: str, args: list[str]) -> list[str] | None:
        result: list[str] = optional_operation(backend, "client_argv")(server, args)
        return result

    @hookimpl(trylast=True)
    def mam_agent_state(self, backend: Backend, server: str, agent: Agent, ctx: CallContext) -> AgentState | None:
        own = getattr(backend, "agent_state", None)
        if own is not None:
            answer: AgentState | None = own(server, agent, ctx)
            return answer
        if agent.state in AGENT_STATES:  # the listing's own field (herdr's agent_status)
            return AgentState(agent.state, "backend", {"field": "agent_status", "value": agent.state})
        return None

    @hookimpl(trylast=True)
    def mam_capture_panes(self, backend: Backend, server: str, agents: tuple[Agent, ...],
                          ctx: CallContext) -> Mapping[str, PaneCapture] | Failure | None:
        capture = getattr(backend, "capture_panes", None)
        if capture is None:
            return None
        answer: Mapping[str, PaneCapture] | Failure = capture(server, agents, ctx)
        return answer

    @hookimpl(trylast=True)
    def mam_agent_remains(self, backend: Backend, server: str, names: tuple[str, ...],
                          ctx: CallContext) -> Mapping[str, Remains] | Failure | None:
        read = getattr(backend, "agent_remains", None)
        if read is None:
            return None
        answer: Mapping[str, Remains] | Failure = read(server, names, ctx)
        return answer

    @hookimpl(trylast=True)
    def mam_send_text(self, backend: Backend, server: str, agent: Agent, text: str, enter: bool,
                      ctx: CallContext) -> SendResult:
        result: SendResult = optional_operation(backend, "send_text")(server, agent, text, enter, ctx)
        return result
