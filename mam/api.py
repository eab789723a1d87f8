"""The public API for backend plugins: everything a plugin may import from mam, in one place.

    from mam.api import hookimpl, BackendSpec, Agent, CallContext, Failure, run, parse_or_failure

The shipped backends import only from here (a test checks it); anything else in `mam` may change without
notice. `HOOK_API` is the version of the hook set (see mam/plugin/spec.py).
A face, beside the CLI (tests/test_layers.py): it may import calls, plugin and util; nothing in mam imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mam.plugin.helpers import first_line, parse_or_failure, poll_until, sent_message
from mam.plugin.listing import find_for_stop
from mam.plugin.records import (
    AGENT_STATES,
    OPERATIONS,
    Agent,
    AgentState,
    Backend,
    BackendSpec,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    CommandResult,
    ErrorKind,
    Failure,
    PaneCapture,
    Remains,
    ScrubRule,
    SendResult,
    ServerCommand,
    ServerError,
    ServerOptions,
    SpawningBackend,
    SpawnRequest,
    SpawnResult,
    StopResult,
)
from mam.plugin.spec import HOOK_API, hookimpl
from mam.util.logfile import open_log, open_text_log
from mam.util.names import NAME_PATTERN, SESSION_ID_PATTERN, is_valid_name

# Deferred imports (inside functions), for start-up: a plugin's import of mam.api loads no runner or machine module
# until it runs a call.


def run(argv: Sequence[str], *, timeout: float, env: Mapping[str, str], cwd: str | None = None,
        stdin: bytes | None = None) -> CommandResult:
    """Run a backend's CLI: an explicit argv, never a shell, killed with its process group at `timeout`; its
    stdin is /dev/null, or the bytes `stdin` (then end of file).

    Looked up in mam.calls.runner at each call, so the kit's `fake_runner` fixture stands in for every backend."""
    from mam.calls import runner

    if stdin is None:  # a stand-in runner of the kit may not take stdin
        return runner.run(argv, timeout=timeout, env=env, cwd=cwd)
    return runner.run(argv, timeout=timeout, env=env, cwd=cwd, stdin=stdin)


def read_text(path: str, *, timeout: float, env: Mapping[str, str]) -> str | None:
    """The text of a file on the machine the backend's processes run on (this one, or the host its calls go to
    over ssh); None when it cannot be read. For a look at system state such as /proc/net/unix."""
    from mam.calls import machine

    return machine.read_text(path, timeout=timeout, env=env)


def net_namespaces(*, timeout: float, env: Mapping[str, str]) -> dict[str, list[str]] | None:
    """The network namespaces (`net:[N]`) of the processes mam can see on the machine the backend's processes
    run on, each with their pids; None when there is no /proc to tell. For reading every namespace's
    /proc/PID/net/unix: the table at /proc/net/unix lists the reader's namespace only."""
    from mam.calls import machine

    return machine.net_namespaces(timeout=timeout, env=env)


__all__ = [
    "AGENT_STATES", "HOOK_API", "NAME_PATTERN", "OPERATIONS", "SESSION_ID_PATTERN", "Agent", "AgentState", "Backend",
    "BackendSpec", "BootstrapContext", "BootstrapResult", "CallContext", "CommandResult", "ErrorKind", "Failure",
    "PaneCapture", "Remains", "ScrubRule", "SendResult", "ServerCommand", "ServerError", "ServerOptions",
    "SpawnRequest",
    "SpawnResult", "SpawningBackend", "StopResult", "find_for_stop", "first_line", "hookimpl", "is_valid_name",
    "net_namespaces", "open_log", "open_text_log", "parse_or_failure", "poll_until", "read_text", "run",
    "sent_message",
]
