"""`mam exec` and the shim: the backend's own CLI against a named server, with mam's guarantees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from conftest import Tmux, Workspace

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@needs_tmux
def test_exec_on_a_down_server_with_no_autostart_passes_tmux_through(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    before = tmux.sockets()
    proc = ws.mam("exec", "--server", server, "--", "list-sessions", env={**ws.env, "MAM_NO_AUTOSTART": "1"})
    assert proc.returncode == 1  # tmux's own exit code
    assert proc.stderr.startswith("error connecting to") or proc.stderr.startswith("no server running on")
    assert tmux.sockets() == before


@needs_tmux
def test_exec_starts_a_down_server_scrubbed_then_runs(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    proc = ws.mam("exec", "--server", server, "--", "list-sessions", "-F", "#{session_name}",
                  env={**ws.env, "CLAUDECODE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["_mam_keepalive"]
    assert "CLAUDECODE" not in tmux.pane_env(server, "=_mam_keepalive")


def test_exec_needs_a_server(ws: Workspace) -> None:
    proc = ws.mam("exec", "--", "agent", "list")
    assert proc.returncode == 2 and "MAM_SERVER" in proc.stderr


def test_exec_herdr_uses_mam_server(ws: Workspace) -> None:
    ws.herdr.start("x")
    proc = ws.mam("exec", "--", "agent", "list", env={**ws.env, "MAM_SERVER": "x"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"]["type"] == "agent_list"
    assert ws.herdr.calls()[-1]["argv"] == ["--session", "x", "agent", "list"]


def test_shim_routes_through_mam_and_never_calls_itself(ws: Workspace) -> None:
    proc = ws.mam("shim", "install")
    assert proc.returncode == 0, proc.stderr
    shim_dir = ws.root / ".mam" / "shim"
    assert sorted(p.name for p in shim_dir.iterdir()) == [".mam-shim", "herdr", "tmux", "zellij"]
    ws.herdr.start("x")
    env = {**ws.env, "PATH": f"{shim_dir}{os.pathsep}{ws.env['PATH']}", "MAM_SERVER": "x", "CLAUDECODE": "1"}
    result = subprocess.run(["herdr", "agent", "list"], env=env, capture_output=True, text=True, timeout=60,
                            cwd=ws.root)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["result"]["agents"] == []
    calls = ws.herdr.calls()
    assert calls[-1]["argv"] == ["--session", "x", "agent", "list"]
    # a down session is started (once, scrubbed) before the call, as `mam exec` does
    result = subprocess.run(["herdr", "agent", "list"], env={**env, "MAM_SERVER": "fresh"}, capture_output=True,
                            text=True, timeout=60, cwd=ws.root)
    assert result.returncode == 0, result.stderr
    starts = [c for c in ws.herdr.server_starts() if "fresh" in c["argv"]]
    assert len(starts) == 1 and "CLAUDECODE" not in starts[0]["env"]
    assert str(shim_dir) not in starts[0]["env"]["PATH"].split(os.pathsep)


@pytest.mark.parametrize(("backend", "args", "refused"), [
    # tmux: getopt reads options only up to the command word; values of -c, -f, -T are skipped
    ("tmux", ["-L", "v", "kill-server"], "-L"),
    ("tmux", ["-2uNLv", "ls"], "-2uNLv"),
    ("tmux", ["-T", "RGB", "-S", "/x", "ls"], "-S"),
    ("tmux", ["-f", "-Lx", "ls"], "-Lx"),  # a value that looks like an option is checked as one
    ("tmux", ["capture-pane", "-p", "-S", "-5"], None),
    ("tmux", ["send-keys", "-t", "=a:", "-l", "--", "-L"], None),
    ("tmux", ["list-sessions", ";", "-L", "v"], None),  # a second command's words are its own
    # zellij: its own options come before the subcommand; after it, -s is the subcommand's
    ("zellij", ["-dsv", "ls"], "-dsv"),
    ("zellij", ["--layout", "x.kdl", "--session=v"], "--session=v"),
    ("zellij", ["list-sessions", "-s"], None),
    ("zellij", ["run", "-s", "--", "sleep", "1"], None),
    # herdr: --session anywhere, `--` included
    ("herdr", ["pane", "read", "w1:p1", "--session", "v"], "--session"),
    ("herdr", ["agent", "start", "a", "--", "--session=v"], "--session=v"),
    ("herdr", ["agent", "read", "a", "--lines", "5"], None),
])
def test_server_options_are_read_from_the_backend_declaration(backend: str, args: list[str],
                                                              refused: str | None) -> None:
    from mam.commands.passthrough import refused_option
    from mam.plugin.manager import Plugins

    options = Plugins({}).spec(backend).server_options
    assert refused_option(args, options) == refused


def test_a_third_party_backend_declares_its_own_server_options() -> None:
    from mam.commands.passthrough import refused_option
    from mam.plugin.records import ServerOptions

    options = ServerOptions(names=("--socket", "-x"), valued=("-o",), before_command=True)
    assert refused_option(["-o", "v", "--socket=/s", "run"], options) == "--socket=/s"
    assert refused_option(["-qx", "s"], options) == "-qx"
    assert refused_option(["run", "-x"], options) is None
    assert refused_option(["-L", "v"], ServerOptions()) is None  # nothing declared, nothing refused


@pytest.mark.parametrize(("backend", "args", "allowed"), [
    # the subcommand names the server mam names (here `mine`), with only its own flags: allowed
    ("zellij", ["kill-session", "mine"], True),
    ("zellij", ["-d", "d", "--force", "mine"], True),
    ("zellij", ["attach", "-c", "mine"], True),
    ("zellij", ["list-sessions", "-n"], True),  # names no server: not a declared command
    ("zellij", ["run", "--name", "kill-session", "--", "kill-session", "victim"], True),  # a pane's argv
    ("zellij", ["--layout", "kill-session", "list-sessions"], True),  # a value, not the command
    ("herdr", ["session", "stop", "--json", "mine"], True),
    ("herdr", ["session", "list", "--json"], True),
    ("herdr", ["agent", "read", "session"], True),
    # another name, no name, or a word that could hide one: refused
    ("zellij", ["kill-session", "victim"], False),
    ("zellij", ["kill-session"], False),
    ("zellij", ["kill-session", "mine", "victim"], False),
    ("zellij", ["attach", "-t", "mine", "victim"], False),  # -t takes a value: `victim` is the session
    ("zellij", ["attach", "mine", "--index", "0"], False),
    ("zellij", ["--config", "/dev/null", "a", "victim"], False),
    ("zellij", ["ka", "-y"], False),
    ("zellij", ["action", "switch-session", "victim"], False),
    ("herdr", ["session", "delete", "victim"], False),
    ("herdr", ["--handoff", "session", "stop", "victim"], False),
    ("herdr", ["session", "stop", "mine", "--handoff"], False),
])
def test_named_commands_are_read_from_the_backend_declaration(backend: str, args: list[str], allowed: bool) -> None:
    from mam.commands.passthrough import command_refusal, named_command
    from mam.plugin.manager import Plugins

    found = named_command(args, Plugins({}).spec(backend).server_options)
    refusal = None if found is None else command_refusal(*found, "mine", backend)
    assert (refusal is None) == allowed, refusal


def test_tmux_declares_no_named_command() -> None:
    # Every tmux command acts on the server -L selects (`list-commands` of tmux 3.3a): -L and -S cover it.
    from mam.plugin.manager import Plugins

    assert Plugins({}).spec("tmux").server_options.commands == ()


def test_a_third_party_backend_declares_its_own_named_commands() -> None:
    from mam.commands.passthrough import command_refusal, named_command
    from mam.plugin.records import ServerCommand, ServerOptions

    options = ServerOptions(valued=("-o",), commands=(ServerCommand(("drop",), flags=("-q",)),
                                                      ServerCommand(("drop-all",), every=True)))
    found = named_command(["-o", "drop", "drop", "-q", "s"], options)
    assert found is not None and command_refusal(*found, "s", "x") is None
    found = named_command(["drop-all"], options)
    assert found is not None and "every x server" in (command_refusal(*found, "s", "x") or "")
    assert named_command(["drop", "s"], ServerOptions()) is None  # nothing declared, nothing refused
