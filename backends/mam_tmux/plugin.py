"""tmux's plugin module, found through the `mam.backends` entry point like any third-party backend."""

from __future__ import annotations

from mam.api import Backend, BackendSpec, ServerOptions, hookimpl
from mam_tmux import MARKERS

# tmux [-2CDlNuvV] [-c shell-command] [-f file] [-L socket-name] [-S socket-path] [-T features] [command ...]:
# getopt stops at the command word, after which -L and -S are a command's own flags (capture-pane -S -5).
# No tmux command names another server: each acts on the one -L selects (kill-server included). `-c` is refused
# with them: its shell command runs instead of any tmux command, and can reach every server (tmux -L other ...).
SERVER_OPTIONS = ServerOptions(names=("-L", "-S", "-c"), valued=("-f", "-T"), before_command=True)


def agent_name_rule(name: str) -> str | None:
    """tmux 3.2-3.6 turn '.' and ':' in a session name into '_': an agent so named would never be found again."""
    if "." in name or ":" in name:
        return f"tmux cannot keep the agent name {name!r}: it turns '.' and ':' in session names into '_'"
    return None


def _load() -> Backend:
    from mam_tmux.backend import TmuxBackend  # start-up: the working module, loaded on use

    return TmuxBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec(name="tmux", description="tmux; a server is a socket name (-L NAME)", executable="tmux",
                        load=_load, markers=MARKERS, server_options=SERVER_OPTIONS,
                        name_rule=agent_name_rule, program_check=True, spawn_env=True,
                        operations=frozenset({"spawn", "stop", "send", "capture", "client_argv", "remains"}))]
