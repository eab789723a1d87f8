"""`mam exec` and the shim: a backend's own CLI against one named server, with mam's guarantees
(the server started scrubbed when it is down, the environment scrubbed, the server named explicitly)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from mam.audit.trail import audited, words_kept
from mam.calls.route import remote_route
from mam.calls.shims import SHIM_GUARD, is_native_binary, is_shim, path_without_shims
from mam.plugin.records import CallContext, ServerCommand, ServerOptions, ServerState
from mam.servers.app import App
from mam.servers.availability import missing_binary_hint
from mam.servers.bootstrap import start_server
from mam.servers.fanout import query_server
from mam.util.errors import MamError
from mam.util.names import check_name
from mam.util.quote import shown

# Deferred imports (inside functions), for start-up: the host resolution loads only for `mam exec` with a host.


def refused_option(args: Sequence[str], options: ServerOptions) -> str | None:
    """The first word of `args` that the backend's CLI would read as one of its server options, or None.

    `args` start where the CLI reads its own options (right after the server mam names). Where in doubt it
    refuses: a value that looks like an option is checked as one, and `--` does not end the options."""
    letters = {n[1] for n in options.names if len(n) == 2 and n[0] == "-" and n[1] != "-"}
    longs = tuple(n for n in options.names if n.startswith("--"))
    valued_letters = {n[1] for n in options.valued if len(n) == 2 and n[0] == "-" and n[1] != "-"}
    valued_longs = {n for n in options.valued if n.startswith("--")}
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if any(word == n or word.startswith(n + "=") for n in longs):
            return word
        takes_value = False
        if word.startswith("--"):  # `--` itself, or another long option
            takes_value = word in valued_longs
        elif word.startswith("-") and len(word) > 1:  # a cluster of one-letter options: -NL, -Lname, -f FILE
            for at, letter in enumerate(word[1:], start=2):
                if letter in letters:
                    return word
                if letter in valued_letters:
                    takes_value = at == len(word)  # else the value is the rest of this word
                    break
        elif options.before_command:
            return None  # the command word: what follows is the command's own
        if takes_value and i < len(args) and not (args[i].startswith("-") and len(args[i]) > 1):
            i += 1  # skip the value, unless it looks like an option: then it is checked as one
    return None


def _command_positions(args: Sequence[str], options: ServerOptions) -> list[int]:
    """Where the words the CLI reads as its command are: not its own options, nor their values. With
    `before_command`, every word from the command word on is the command's; otherwise options are anywhere."""
    valued = set(options.valued)
    positions: list[int] = []
    i = 0
    while i < len(args):
        word = args[i]
        if positions and options.before_command:
            positions.append(i)
        elif word.startswith("-") and len(word) > 1:
            if word in valued and i + 1 < len(args) and not args[i + 1].startswith("-"):
                i += 1  # its value
        else:
            positions.append(i)
        i += 1
    return positions


def named_command(args: Sequence[str], options: ServerOptions) -> tuple[ServerCommand, list[str]] | None:
    """The declared subcommand `args` run, if they run one that names a server itself, with the words after it."""
    positions = _command_positions(args, options)
    for command in options.commands:
        at = positions[:len(command.words)]
        if len(at) == len(command.words) and tuple(args[i] for i in at) == command.words:
            return command, [args[i] for i in range(at[0] + 1, len(args)) if i not in at]
    return None


def command_refusal(command: ServerCommand, rest: Sequence[str], server: str, backend: str) -> str | None:
    """Why exec refuses `command` with the words `rest` on `server`, or None when it names only that server."""
    spelled = " ".join(command.words)
    if command.every:
        return f"exec refuses {shown(spelled, 60, quote='repr', cut='inside')}: it reaches every {backend} " \
               f"server, and exec reaches only the one mam names (--server {server})"
    if [word for word in rest if word not in command.flags] == [server]:
        return None
    flags = f" (flags: {', '.join(command.flags)})" if command.flags else ""
    given = shown(" ".join([spelled, *rest]), 60, quote="repr", cut="inside")
    allowed = shown(f"{spelled} {server}", 60, quote="repr", cut="inside")
    return f"exec refuses {given}: {spelled} names a {backend} server itself, and exec reaches only the one mam " \
           f"names: allowed as {allowed}{flags}"


# Recorded when handed over (ok) or refused: what the backend's own CLI then does is its own, and mam, replaced by
# it, never sees the outcome.
@audited("exec", agent=lambda bound: None,
         kept=lambda a: {"server": a.get("server"), "host": a.get("host"), "args": words_kept(a["args"])})
def exec_command(app: App, server: str | None, args: list[str],
                 host: str | None = None) -> tuple[str, list[str], dict[str, str]]:
    """The program, argv and environment `mam exec` replaces itself with. On another `host` (default
    $MAM_HOST) that is the local ssh client, with a terminal, running the backend's command line there."""
    from mam.servers.hosts import chosen_host

    there = chosen_host(app, host)
    route = app.route(there)
    if route is not None:
        with remote_route(route):
            _, argv, env = _exec_command(app, server, args, there)
        ssh_argv = route.client_argv(argv)
        ssh = shutil.which(ssh_argv[0], path=env.get("PATH", ""))
        if ssh is None:
            raise MamError("backend_unavailable", f"{ssh_argv[0]}: not found on PATH", hint="install OpenSSH's client")
        return ssh, ssh_argv, route.ssh_env(env)
    return _exec_command(app, server, args, "")


def _exec_command(app: App, server: str | None, args: list[str], there: str) -> tuple[str, list[str], dict[str, str]]:
    name = server or app.env.get("MAM_SERVER")
    if not name:
        raise MamError("usage", "mam exec needs a server", hint="pass --server NAME or set MAM_SERVER")
    check_name(name, "server name")
    options = app.plugins.spec(app.backend_name).server_options
    word = refused_option(args, options)
    if word is not None:  # before anything runs: it would reach another server than the one mam names
        raise MamError("usage", f"exec refuses {shown(word, 60, quote='repr', cut='inside')}: {app.backend_name} "
                                f"declares it as reaching past the server mam names (another server or socket, or a "
                                f"command run outside it); exec reaches only --server {name}")
    found = named_command(args, options)
    if found is not None and (why := command_refusal(*found, name, app.backend_name)) is not None:
        raise MamError("usage", why)
    backend = app.plugins.backend(app.backend_name)
    argv = app.plugins.client_argv(backend, name, args)
    if not argv:  # a plugin wrapping the hook may still decline
        raise MamError("operation_failed", f"backend {app.backend_name} cannot run its own command line")
    env = dict(app.server_env)
    env["PATH"] = path_without_shims(env.get("PATH", ""))
    # On another host the program is looked for there, by the remote shell; here only its name is checked.
    program = shutil.which(argv[0], path=env["PATH"]) if not there else argv[0]
    if program is None:
        raise MamError("backend_unavailable", f"{argv[0]}: not found on PATH",
                       hint=missing_binary_hint(app, app.backend_name))
    if not there and is_shim(program):
        # Every backend call (the query, a bootstrap, the exec) would run it, and it would call mam again.
        real = str(Path(program).resolve())
        where = shown(program, 200, quote="repr", cut="inside") + (
            f" -> {shown(real, 200, quote='repr', cut='inside')}" if real != program else "")
        raise MamError("operation_failed", f"{argv[0]} on PATH is a mam shim outside its folder ({where}), not the "
                                           f"real {argv[0]}: remove it, or put the real {argv[0]} before it on PATH")
    if not there and SHIM_GUARD in app.env and not is_native_binary(program):
        # The scrubbed env has no guard (a server the program starts would keep it for life), but a script
        # may be a wrapper that runs a shim again, and only the guard stops that loop.
        env[SHIM_GUARD] = app.env[SHIM_GUARD]
    autostart = app.autostart
    # A command that reads a name as a prefix would take a server that is not running for another one's.
    prefixed = found[0] if found is not None and found[0].prefix else None
    if autostart or prefixed is not None:
        outcome = query_server(app.plugins, app.backend_name, name, CallContext(app.timeout, app.backend_env),
                               there or None)
        state = outcome.state
        if state is ServerState.DOWN and autostart:
            start_server(app, name, there or None)  # scrubbed: the guard of this call stays out of the server
            state = ServerState.UP
        if prefixed is not None and state is not ServerState.UP:
            raise MamError("operation_failed",
                           f"exec refuses {shown(' '.join(prefixed.words), 60, quote='repr', cut='inside')} while "
                           f"{app.backend_name} server {name} is {state.value}: {app.backend_name} would take "
                           f"{name!r} as the start of another server's name; start it first (mam --backend "
                           f"{app.backend_name} bootstrap --server {name})")
    return program, [argv[0], *argv[1:]], env
