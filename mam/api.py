"""The public API for backend plugins: everything a plugin may import from mam, in one place.

    from mam.api import hookimpl, BackendSpec, Agent, CallContext, Failure, run, parse_or_failure

The shipped backends import only from here (a test checks it); anything else in `mam` may change without
notice. `HOOK_API` is the version of the hook set (see mam/hookspecs.py).
"""

from __future__ import annotations

from mam.hookspecs import HOOK_API, hookimpl
from mam.listing import find_for_stop
from mam.logfile import open_log, open_text_log
from mam.model import (
    Agent,
    Backend,
    BackendSpec,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    CommandResult,
    ErrorKind,
    Failure,
    ScrubRule,
    ServerError,
    ServerOptions,
    SpawningBackend,
    SpawnRequest,
    SpawnResult,
    StopResult,
)
from mam.names import NAME_PATTERN, is_valid_name
from mam.runner import first_line, parse_or_failure, poll_until, run

__all__ = [
    "HOOK_API", "NAME_PATTERN", "Agent", "Backend", "BackendSpec", "BootstrapContext", "BootstrapResult",
    "CallContext", "CommandResult", "ErrorKind", "Failure", "ScrubRule", "ServerError", "ServerOptions",
    "SpawnRequest", "SpawnResult", "SpawningBackend", "StopResult", "find_for_stop", "first_line", "hookimpl",
    "is_valid_name", "open_log", "open_text_log", "parse_or_failure", "poll_until", "run",
]
