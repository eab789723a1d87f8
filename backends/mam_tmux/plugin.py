"""tmux's plugin module, found through the `mam.backends` entry point like any third-party backend."""

from __future__ import annotations

from mam.hookspecs import hookimpl
from mam.model import Backend, BackendSpec, ScrubRule, ServerOptions

MARKERS = ("TMUX", "TMUX_PANE")
# tmux [-2CDlNuvV] [-c shell-command] [-f file] [-L socket-name] [-S socket-path] [-T features] [command ...]:
# getopt stops at the command word, after which -L and -S are a command's own flags (capture-pane -S -5).
# No tmux command names another server: each acts on the one -L selects (kill-server included).
SERVER_OPTIONS = ServerOptions(names=("-L", "-S"), valued=("-c", "-f", "-T"), before_command=True)


def _load() -> Backend:
    from mam_tmux.backend import TmuxBackend

    return TmuxBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec(name="tmux", description="tmux; a server is a socket name (-L NAME)", executable="tmux",
                        load=_load, markers=MARKERS, server_options=SERVER_OPTIONS)]


@hookimpl
def mam_env_scrub_rules() -> list[ScrubRule]:
    return [ScrubRule(marker, "backend tmux") for marker in MARKERS]
