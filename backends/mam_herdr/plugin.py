"""herdr's plugin module: cheap to import. The working code is in `mam_herdr.backend`, loaded on use."""

from __future__ import annotations

from mam.hookspecs import hookimpl
from mam.model import Backend, BackendSpec, ScrubRule, ServerOptions

# What herdr sets in each of its panes (reference/herdr.md section 7 and env-markers.md).
MARKERS = (
    "HERDR_ENV", "HERDR_SOCKET_PATH", "HERDR_CLIENT_SOCKET_PATH", "HERDR_BIN_PATH", "HERDR_SESSION",
    "HERDR_WORKSPACE_ID", "HERDR_TAB_ID", "HERDR_PANE_ID", "HERDR_STARTUP_CWD", "HERDR_PLUGIN_*",
)
# herdr takes `--session NAME` / `--session=NAME` anywhere before a literal `--`; refused after it too, to be safe.
SERVER_OPTIONS = ServerOptions(names=("--session",))


def _load() -> Backend:
    from mam_herdr.backend import HerdrBackend

    return HerdrBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec(name="herdr", description="herdr, the agent-focused terminal multiplexer",
                        executable="herdr", load=_load, markers=MARKERS,
                        server_options=SERVER_OPTIONS)]


@hookimpl
def mam_env_scrub_rules() -> list[ScrubRule]:
    return [ScrubRule(marker, "backend herdr") for marker in MARKERS]
