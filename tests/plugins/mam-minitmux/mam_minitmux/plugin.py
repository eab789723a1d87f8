"""minitmux's plugin module: cheap to import. The working code is in `mam_minitmux.backend`, loaded on use."""

from __future__ import annotations

from mam.api import Backend, BackendSpec, ServerOptions, hookimpl

NEEDS_HOOK_API = 2  # capture_panes and send_text came with hook API 2

MARKERS = ("TMUX", "TMUX_PANE")  # what tmux sets in its panes: never passed on to a server or an agent mam starts
# The options of tmux that pick a server: `mam exec` refuses them, so that it reaches only the server mam names.
SERVER_OPTIONS = ServerOptions(names=("-L", "-S", "-c"), valued=("-f", "-T"), before_command=True)


def _load() -> Backend:
    from mam_minitmux.backend import MiniTmuxBackend

    return MiniTmuxBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec(name="minitmux", description="a minimal tmux backend: each agent is a tmux session",
                        executable="tmux", load=_load, markers=MARKERS, server_options=SERVER_OPTIONS,
                        spawn_env=True,  # it sets the agent's variables itself (new-session -e)
                        operations=frozenset({"spawn", "stop", "send", "capture", "client_argv"}))]
