"""The hook API's promises to plugin authors: its version, and the facts no plugin can overrule."""

from __future__ import annotations

import inspect
import os

import mam.plugin.spec
from mam.plugin.manager import Plugins
from mam.plugin.records import CommandResult, ErrorKind, Failure, ServerError
from mam.plugin.spec import hookimpl


class _SaysDownToEverything:
    @hookimpl
    def mam_classify_error(self, backend: object, failure: Failure) -> ServerError:
        return ServerError(ErrorKind.SERVER_DOWN, "a careless plugin")


def test_a_classify_hook_cannot_call_a_process_fact_down() -> None:
    plugins = Plugins(os.environ)
    plugins.pm.register(_SaysDownToEverything())
    backend = plugins.backend("herdr")
    facts = {
        ErrorKind.TIMEOUT: CommandResult(("herdr",), None, timed_out=True, timeout=1),
        ErrorKind.NOT_INSTALLED: CommandResult(("herdr",), None, not_found=True),
        ErrorKind.UNKNOWN: CommandResult(("herdr",), -9, "", '{"error":{"code":"server_not_running"}}'),
    }
    for kind, result in facts.items():
        assert plugins.classify(backend, Failure("herdr", "s", result)).kind is kind
    # What is not a fact about the process is the plugins' to say.
    plain = Failure("herdr", "s", CommandResult(("herdr",), 1, "", "whatever"))
    assert plugins.classify(backend, plain).kind is ErrorKind.SERVER_DOWN


def test_every_hook_says_since_which_api_version() -> None:
    hooks = [getattr(mam.plugin.spec, n) for n in dir(mam.plugin.spec) if n.startswith("mam_")]
    assert isinstance(mam.plugin.spec.HOOK_API, int) and mam.plugin.spec.HOOK_API >= 1
    for hook in hooks:
        doc = inspect.getdoc(hook) or ""
        since = [int(w.rstrip(".")) for line in doc.splitlines() if line.startswith("Since hook API")
                 for w in line.split()[3:4]]
        assert since and 1 <= since[0] <= mam.plugin.spec.HOOK_API, hook.__name__
