"""Attacks on `mam exec`, the shims and the argv a spawn hands herdr and zellij.

- exec must reach only the server mam names: the backend's own server and socket options are refused, and so
  are its subcommands that name another server themselves (zellij kill-session, herdr session stop, ...).
- a shim must never run itself, however it was linked or wrapped: one hop, a clear line, nothing left running.
- "argv is run as given, no shell" holds on herdr and zellij too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Tmux, Workspace, live_processes_with

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _one_line_refusal(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mam: "), proc.stderr
    return lines[0]


# --- exec reaches only the server mam names -----------------------------------------------------------------

@pytest.fixture
def two_servers(ws: Workspace, tmux: Tmux) -> tuple[str, str]:
    """A victim server with an agent, and the name of the (down) server exec is told to use."""
    victim = tmux.name()
    tmux.agent(victim, "v")
    return tmux.name(), victim


def _alive(tmux: Tmux, server: str) -> bool:
    return tmux.run(server, "has-session", "-t", "=v", check=False).returncode == 0


@needs_tmux
@pytest.mark.parametrize("form", [
    ["-L", "{victim}", "kill-server"],
    ["-L{victim}", "kill-server"],  # attached value
    ["-NL", "{victim}", "kill-server"],  # inside a cluster of one-letter flags
    ["-uNL{victim}", "kill-server"],
    ["-f", "/dev/null", "-L", "{victim}", "kill-server"],  # after another option's value
    ["-S", "{socket}", "new-session", "-d"],  # a server anywhere
    ["-S{socket}", "new-session", "-d"],
    ["-2S", "{socket}", "new-session", "-d"],
    ["--", "-L", "{victim}", "kill-server"],  # refused too: nothing legitimate looks like this
])
def test_exec_refuses_tmux_server_options_before_anything_runs(ws: Workspace, tmux: Tmux, two_servers: tuple[str, str],
                                                               tmp_path: Path, form: list[str]) -> None:
    server, victim = two_servers
    socket = tmp_path / "elsewhere.sock"
    args = [w.replace("{victim}", victim).replace("{socket}", str(socket)) for w in form]
    before = tmux.sockets()
    try:
        proc = ws.mam("exec", "--server", server, "--", *args)
        line = _one_line_refusal(proc)
        assert "exec refuses" in line
        assert "server" in line
        assert _alive(tmux, victim)
        assert not socket.exists()
        assert tmux.sockets() == before  # `server` was not started either: nothing ran at all
    finally:
        if socket.exists():  # a regression started a server there: never leave it running
            subprocess.run(["tmux", "-S", str(socket), "kill-server"], env=tmux.env, capture_output=True, timeout=20)


@needs_tmux
def test_tmux_reads_server_options_only_before_the_command_word(ws: Workspace, tmux: Tmux,
                                                                two_servers: tuple[str, str]) -> None:
    _, victim = two_servers
    # After the command word, -S and -L are the command's own flags: allowed.
    proc = ws.mam("exec", "--server", victim, "--", "capture-pane", "-p", "-S", "-5", "-t", "=v:")
    assert proc.returncode == 0, proc.stderr
    proc = ws.mam("exec", "--server", victim, "--", "send-keys", "-t", "=v:", "-l", "--", "-L")
    assert proc.returncode == 0, proc.stderr
    # The same letters before it select a server: refused.
    proc = ws.mam("exec", "--server", victim, "--", "-S", "/tmp/x.sock", "capture-pane", "-p")
    _one_line_refusal(proc)


@needs_tmux
def test_the_tmux_shim_refuses_another_server(ws: Workspace, tmux: Tmux, two_servers: tuple[str, str]) -> None:
    server, victim = two_servers
    assert ws.mam("shim", "install").returncode == 0
    env = {**ws.env, "PATH": f"{ws.root / '.mam' / 'shim'}{os.pathsep}{ws.env['PATH']}", "MAM_SERVER": server}
    proc = subprocess.run(["tmux", "-L", victim, "kill-server"], env=env, capture_output=True, text=True,
                          timeout=60, cwd=ws.root, stdin=subprocess.DEVNULL)
    _one_line_refusal(proc)
    assert _alive(tmux, victim)
    assert server not in tmux.sockets()


@pytest.mark.parametrize("form", [
    ["--session", "victim", "agent", "list"],
    ["agent", "list", "--session", "victim"],  # herdr reads it anywhere before `--`
    ["agent", "list", "--session=victim"],
    ["agent", "start", "a", "--kind", "claude", "--pane", "w1:p1", "--", "--session", "victim"],  # and after
    ["agent", "list", "--machine", "victim"],  # herdr 0.9's global option: another machine's server
    ["agent", "list", "--machine=victim"],
])
def test_exec_refuses_herdr_session_options(ws: Workspace, form: list[str]) -> None:
    ws.herdr.start("victim")
    calls = len(ws.herdr.calls())
    proc = ws.mam("exec", "--server", "mine", "--", *form)
    _one_line_refusal(proc)
    assert len(ws.herdr.calls()) == calls  # no herdr process at all: not even a query of `mine`
    assert not ws.herdr.running("mine")


@pytest.mark.parametrize("form", [
    ["--session", "victim", "action", "list-panes", "--json"],
    ["--session=victim", "action", "list-panes", "--json"],
    ["-s", "victim", "action", "list-panes", "--json"],
    ["-svictim", "action", "list-panes", "--json"],
    ["-ds", "victim", "action", "list-panes", "--json"],  # -d -s victim
    ["--config", "/dev/null", "-s", "victim", "action", "list-panes", "--json"],
    ["--server", "/tmp/anywhere.sock"],  # zellij's hidden option: a server on any socket
])
def test_exec_refuses_zellij_session_options(ws: Workspace, tmp_path: Path, form: list[str]) -> None:
    state = tmp_path / "zellij-sock"
    env = {**ws.env, "ZELLIJ_SOCKET_DIR": str(state), "MAM_BACKEND": "zellij"}
    proc = ws.mam("exec", "--server", "mine", "--", *form, env=env)
    _one_line_refusal(proc)
    assert not (state / "fake-calls.jsonl").exists()  # no zellij process ran


# --- exec refuses the subcommands that name another server themselves ----------------------------------------

def _zellij_env(ws: Workspace, tmp_path: Path) -> dict[str, str]:
    return {**ws.env, "ZELLIJ_SOCKET_DIR": str(tmp_path / "zellij-sock"), "MAM_BACKEND": "zellij"}


def _zellij_calls(env: dict[str, str]) -> list[list[str]]:
    path = Path(env["ZELLIJ_SOCKET_DIR"]) / "fake-calls.jsonl"
    return [json.loads(line)["argv"] for line in path.read_text().splitlines()] if path.exists() else []


def _zellij_live(env: dict[str, str]) -> list[str]:
    """What a user reads in `zellij ls -n`: the sessions that run."""
    proc = subprocess.run(["zellij", "list-sessions", "-n"], env=env, capture_output=True, text=True, timeout=20,
                          stdin=subprocess.DEVNULL)
    return [line.split(" [Created")[0] for line in proc.stdout.splitlines() if "EXITED" not in line]


def _zellij_session(env: dict[str, str], name: str) -> None:
    subprocess.run(["zellij", "attach", "--create-background", name], env=env, check=True, timeout=20,
                   stdin=subprocess.DEVNULL, capture_output=True)


@pytest.mark.parametrize("form", [
    ["kill-session", "victim"],
    ["k", "victim"],  # its alias
    ["-d", "kill-session", "victim"],  # after zellij's own options
    ["--config", "/dev/null", "k", "victim"],
    ["delete-session", "--force", "victim"],
    ["d", "victim", "-f"],
    ["attach", "victim"],
    ["a", "-b", "victim2"],  # a session anywhere
    ["watch", "victim"],
    ["kill-session"],  # no name: never mam's to pick
    ["kill-session", "--", "victim"],
    ["attach", "--index", "0", "mine"],  # picks by index, whatever the name
    ["attach", "--index=0", "mine"],
    ["kill-all-sessions", "-y"],
    ["ka", "--yes"],
    ["delete-all-sessions", "-y", "-f"],
    ["web", "--daemonize"],  # serves every session
    ["action", "switch-session", "victim"],
    ["ac", "rename-session", "victim"],
])
def test_exec_refuses_zellij_subcommands_naming_another_session(ws: Workspace, tmp_path: Path,
                                                                form: list[str]) -> None:
    env = _zellij_env(ws, tmp_path)
    _zellij_session(env, "victim")
    calls = len(_zellij_calls(env))
    proc = ws.mam("exec", "--server", "mine", "--", *form, env=env)
    line = _one_line_refusal(proc)
    assert "exec refuses" in line and "mine" in line
    assert _zellij_calls(env)[calls:] == []  # nothing ran: no query, no start of `mine`
    assert _zellij_live(env) == ["victim"]


def test_exec_lets_zellij_subcommands_name_the_session_mam_names(ws: Workspace, tmp_path: Path) -> None:
    env = _zellij_env(ws, tmp_path)
    _zellij_session(env, "victim")
    assert ws.mam("bootstrap", "--server", "mine", env=env).returncode == 0
    proc = ws.mam("exec", "--server", "mine", "--", "kill-session", "mine", env=env)
    assert proc.returncode == 0, proc.stderr
    assert _zellij_live(env) == ["victim"]
    proc = ws.mam("exec", "--server", "mine", "--", "delete-session", "mine", "--force", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "mine" not in subprocess.run(["zellij", "ls", "-n"], env=env, capture_output=True, text=True,
                                        timeout=20).stdout


def test_exec_zellij_attach_only_to_a_running_session_mam_names(ws: Workspace, tmp_path: Path) -> None:
    # zellij attach takes a name that is not running as the prefix of one that is: `vic` would reach `victim`.
    env = _zellij_env(ws, tmp_path)
    _zellij_session(env, "victim")
    calls = len(_zellij_calls(env))
    proc = ws.mam("exec", "--server", "vic", "--", "attach", "vic", env={**env, "MAM_NO_AUTOSTART": "1"})
    line = _one_line_refusal(proc, code=1)
    assert "vic" in line and "down" in line
    assert not any(c[:1] == ["client-attached"] for c in _zellij_calls(env)[calls:])
    # Started by mam first, it is the session attach reaches.
    proc = ws.mam("exec", "--server", "vic", "--", "attach", "vic", env=env)
    assert proc.returncode == 0, proc.stderr
    assert [c for c in _zellij_calls(env) if c[:1] == ["client-attached"]] == [["client-attached", "vic"]]


@pytest.mark.parametrize("form", [
    ["session", "stop", "victim"],
    ["session", "stop", "--json", "victim"],
    ["session", "delete", "victim", "--json"],
    ["session", "attach", "victim"],
    ["session", "stop"],  # no name
    ["session", "stop", "mine", "victim"],
    ["--remote", "victim-host"],  # a herdr server on another machine
    ["--remote=victim-host", "agent", "list"],
])
def test_exec_refuses_herdr_session_commands_naming_another_session(ws: Workspace, form: list[str]) -> None:
    ws.herdr.start("victim")
    calls = len(ws.herdr.calls())
    proc = ws.mam("exec", "--server", "mine", "--", *form)
    line = _one_line_refusal(proc)
    assert "exec refuses" in line and "mine" in line
    assert ws.herdr.calls()[calls:] == []
    assert ws.herdr.running("victim") and not ws.herdr.running("mine")


def test_exec_lets_herdr_stop_the_session_mam_names(ws: Workspace) -> None:
    ws.herdr.start("victim")
    ws.herdr.start("mine")
    proc = ws.mam("exec", "--server", "mine", "--", "session", "stop", "mine", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stopped"] is True
    assert not ws.herdr.running("mine") and ws.herdr.running("victim")


def test_the_shims_refuse_subcommands_naming_another_session(ws: Workspace, tmp_path: Path) -> None:
    assert ws.mam("shim", "install").returncode == 0
    env = _zellij_env(ws, tmp_path)
    _zellij_session(env, "victim")
    ws.herdr.start("victim")
    env.update(PATH=f"{ws.root / '.mam' / 'shim'}{os.pathsep}{env['PATH']}", MAM_SERVER="mine")
    env.pop("MAM_BACKEND")  # each shim names its own backend
    for argv in (["zellij", "kill-session", "victim"], ["herdr", "session", "stop", "victim"]):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=ws.root,
                              stdin=subprocess.DEVNULL)
        line = _one_line_refusal(proc)
        assert "victim" in line and "mine" in line
    assert _zellij_live(_zellij_env(ws, tmp_path)) == ["victim"]
    assert ws.herdr.running("victim") and not ws.herdr.running("mine")


# --- a shim never runs itself -------------------------------------------------------------------------------

def _carrying(token: str) -> list[int]:
    """Live processes whose environment holds the test's token: whatever the shim started, at any depth."""
    return list(live_processes_with("MAM_TEST_TOKEN", token))


def _kill_all(token: str) -> list[int]:
    """Kill every process carrying `token` until none is left; return those found still running at first."""
    first = _carrying(token)
    deadline = time.monotonic() + 30
    quiet = 0
    while quiet < 3 and time.monotonic() < deadline:  # a loop that forks keeps making new ones: repeat
        found = _carrying(token)
        quiet = quiet + 1 if not found else 0
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    return first


def _run_bounded(argv: list[str], env: dict[str, str], cwd: Path, token: str,
                 limit: float = 20) -> subprocess.CompletedProcess[str]:
    """Run argv with a hard time limit; whatever it leaves behind is killed, and reported."""
    proc = subprocess.Popen(argv, env={**env, "MAM_TEST_TOKEN": token}, cwd=cwd, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_all(token)
        proc.kill()
        proc.communicate()
        pytest.fail(f"{argv[0]} was still running after {limit} s: a shim loop")
    time.sleep(0.5)  # anything it started in the background has had time to multiply
    left = _kill_all(token)
    assert left == [], f"processes still running after {argv[0]} returned: {left}"
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


@needs_tmux
def test_a_shim_linked_into_another_path_folder_fails_after_one_hop(ws: Workspace, tmux: Tmux,
                                                                    tmp_path: Path) -> None:
    assert ws.mam("shim", "install").returncode == 0
    elsewhere = tmp_path / "bin"
    elsewhere.mkdir()
    (elsewhere / "tmux").symlink_to(ws.root / ".mam" / "shim" / "tmux")
    server = tmux.name()  # down: mam exec would start it, through the same PATH
    env = {**ws.env, "PATH": f"{elsewhere}{os.pathsep}{ws.env['PATH']}", "MAM_SERVER": server,
           "MAM_TIMEOUT": "2"}
    proc = _run_bounded(["tmux", "list-sessions"], env, ws.root, uuid.uuid4().hex)
    line = _one_line_refusal(proc, code=1)
    assert "shim" in line and str(elsewhere / "tmux") in line
    assert server not in tmux.sockets()


@needs_tmux
def test_a_wrapper_that_calls_a_shim_cannot_loop(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    # A `tmux` wrapper first on PATH that runs a shim by its path: mam exec finds the wrapper, which is no
    # shim, and the wrapper finds the shim again. Only the shim's guard can see this loop.
    assert ws.mam("shim", "install").returncode == 0
    wrappers = tmp_path / "wrappers"
    wrappers.mkdir()
    wrapper = wrappers / "tmux"
    wrapper.write_text(f"#!/bin/sh\nexec {ws.root / '.mam' / 'shim' / 'tmux'} \"$@\"\n")
    wrapper.chmod(0o755)
    server = tmux.name()
    env = {**ws.env, "PATH": f"{wrappers}{os.pathsep}{ws.env['PATH']}", "MAM_SERVER": server, "MAM_TIMEOUT": "2"}
    proc = _run_bounded(["tmux", "list-sessions"], env, ws.root, uuid.uuid4().hex)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stderr.splitlines()[-1].startswith("mam shim: "), proc.stderr
    assert server not in tmux.sockets()

    # Used as meant, the shim starts the server, and the guard it sets for its own call stays out of it.
    env = {**ws.env, "PATH": f"{ws.root / '.mam' / 'shim'}{os.pathsep}{ws.env['PATH']}", "MAM_SERVER": server}
    result = subprocess.run(["tmux", "list-sessions", "-F", "#{session_name}"], env=env, capture_output=True,
                            text=True, timeout=60, cwd=ws.root, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["_mam_keepalive"]
    assert not any(k.startswith("MAM_SHIM") for k in tmux.pane_env(server, "=_mam_keepalive"))


# --- argv is run as given on herdr and zellij ----------------------------------------------------------------

def _recorder(folder: Path, name: str, record: Path, stay: float = 0) -> Path:
    """A stand-in agent program that writes the argv and cwd it was started with, then runs `stay` seconds
    (an agent that exits at once is a failed spawn where the backend watches for that)."""
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / name
    program.write_text(f"#!{shutil.which('python3') or '/usr/bin/python3'}\nimport json, os, sys, time\n"
                       f"open({str(record)!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], 'cwd': os.getcwd()}}))\n"
                       f"time.sleep({stay})\n")
    program.chmod(0o755)
    return program


def _recorded(record: Path, wait: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + wait
    while not record.exists():
        assert time.monotonic() < deadline, "the program was never started"
        time.sleep(0.05)
    time.sleep(0.05)
    data: dict[str, Any] = json.loads(record.read_text())
    return data


HOSTILE = ["'touch {pwned}; exec sleep 60'", "two words", "", "a'b", "$HOME", "semi;colon", "`id`", "-x"]


def test_herdr_hands_the_agent_its_arguments_exactly(ws: Workspace, tmp_path: Path) -> None:
    pwned, record = tmp_path / "pwned", tmp_path / "record.json"
    _recorder(tmp_path / "agents", "claude", record)
    env = {**ws.env, "PATH": f"{tmp_path / 'agents'}{os.pathsep}{ws.env['PATH']}"}
    args = [a.replace("{pwned}", str(pwned)) for a in HOSTILE]
    proc = ws.mam("spawn", "coder", "--agent", "claude", "--server", "team", "--cwd", str(ws.root), "--", *args,
                  env=env)
    assert proc.returncode == 0, proc.stderr
    session = yaml.safe_load(ws.registry.read_text())["sessions"][0]["agent_session"]  # mam's own, first
    assert _recorded(record) == {"argv": ["--session-id", session, *args], "cwd": str(ws.root)}
    assert not pwned.exists()


@pytest.mark.parametrize("command", ["'touch {pwned}; exec sleep 60'", '"{dir}/my agent/run"'])
def test_herdr_refuses_a_command_it_would_not_run(ws: Workspace, tmp_path: Path, command: str) -> None:
    # herdr types the program of its agent kind itself: `--command` cannot be honoured, so it is refused
    # rather than replaced by `claude`.
    pwned, record = tmp_path / "pwned", tmp_path / "record.json"
    _recorder(tmp_path / "agents", "claude", record)
    _recorder(tmp_path / "my agent", "run", record)
    env = {**ws.env, "PATH": f"{tmp_path / 'agents'}{os.pathsep}{ws.env['PATH']}"}
    command = command.replace("{pwned}", str(pwned)).replace("{dir}", str(tmp_path))
    proc = ws.mam("spawn", "coder", "--agent", "claude", "--command", command, "--server", "team", env=env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "herdr" in proc.stderr and "--command" in proc.stderr
    time.sleep(0.3)
    assert not record.exists() and not pwned.exists()
    assert not any(c["argv"][2:4] == ["agent", "start"] for c in ws.herdr.calls())


def test_zellij_runs_the_argv_as_given(ws: Workspace, tmp_path: Path) -> None:
    pwned, record = tmp_path / "pwned", tmp_path / "record.json"
    program = _recorder(tmp_path / "my agent", "run", record, stay=3)
    env = {**ws.env, "ZELLIJ_SOCKET_DIR": str(tmp_path / "zellij-sock"), "MAM_BACKEND": "zellij",
           "MAM_BOOTSTRAP_TIMEOUT": "1"}
    args = [a.replace("{pwned}", str(pwned)) for a in HOSTILE]
    # a program path with a space, quoted for --command as a shell user would
    proc = ws.mam("spawn", "coder", "--command", f'"{program}"', "--server", "work", "--cwd", str(ws.root),
                  "--", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    assert _recorded(record) == {"argv": args, "cwd": str(ws.root)}
    # One word is one program name, never a shell line: zellij finds no such program.
    proc = ws.mam("spawn", "one", "--command", f"'touch {pwned}; exec sleep 60'", "--server", "work", env=env)
    assert proc.returncode == 2 and "no such program" in proc.stderr, (proc.stdout, proc.stderr)
    time.sleep(0.3)
    assert not pwned.exists()


# tmux's client option `-c shell-command` runs a shell command: one that can reach any server.
_KILL_VICTIM = "tmux -f /dev/null -L {victim} kill-server"


@needs_tmux
@pytest.mark.parametrize("form", [
    ["-c", _KILL_VICTIM],
    ["-c" + _KILL_VICTIM],  # attached value
    ["-Nc", _KILL_VICTIM],  # inside a cluster of one-letter flags
    ["-uNc" + _KILL_VICTIM],
    ["-f", "/dev/null", "-c", _KILL_VICTIM],  # after another option's value
])
def test_exec_refuses_tmux_shell_command_option(ws: Workspace, tmux: Tmux, two_servers: tuple[str, str],
                                                form: list[str]) -> None:
    server, victim = two_servers
    before = tmux.sockets()
    proc = ws.mam("exec", "--server", server, "--", *(w.replace("{victim}", victim) for w in form))
    assert "exec refuses" in _one_line_refusal(proc)
    assert _alive(tmux, victim)
    assert tmux.sockets() == before  # nothing ran: not even the server exec names was started


@needs_tmux
def test_the_tmux_shim_refuses_a_shell_command(ws: Workspace, tmux: Tmux, two_servers: tuple[str, str]) -> None:
    server, victim = two_servers
    assert ws.mam("shim", "install").returncode == 0
    env = {**ws.env, "PATH": f"{ws.root / '.mam' / 'shim'}{os.pathsep}{ws.env['PATH']}", "MAM_SERVER": server}
    for form in (["-c", _KILL_VICTIM], ["-Nc" + _KILL_VICTIM]):
        proc = subprocess.run(["tmux", *(w.replace("{victim}", victim) for w in form)], env=env,
                              capture_output=True, text=True, timeout=60, cwd=ws.root, stdin=subprocess.DEVNULL)
        _one_line_refusal(proc)
        assert _alive(tmux, victim)
    assert server not in tmux.sockets()
    # a command word's own -c stays allowed: it belongs to the command (new-window -c DIR)
    proc = subprocess.run(["tmux", "new-session", "-d", "-s", "w", "-c", "/"], env=env, capture_output=True,
                          text=True, timeout=60, cwd=ws.root, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr


def test_a_fifo_on_path_never_blocks_the_shim_checks(ws: Workspace, tmp_path: Path) -> None:
    # An executable FIFO named like the backend: opened for reading without O_NONBLOCK, it blocks until a
    # writer comes, and `mam exec` would hang before it could say anything.
    fifo = tmp_path / "tmux"
    os.mkfifo(fifo)
    fifo.chmod(0o755)
    check = "from mam.calls.shims import is_native_binary, is_shim; import sys; print(is_shim(sys.argv[1]), " \
            "is_native_binary(sys.argv[1]))"
    proc = subprocess.run([sys.executable, "-c", check, str(fifo)], env=ws.env, capture_output=True, text=True,
                          timeout=20, cwd=ws.root, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and proc.stdout.split() == ["False", "False"], proc.stderr
