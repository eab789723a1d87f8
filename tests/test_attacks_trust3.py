"""Attack cases of issue 20 (third trust round): a user's regex that backtracks without bound, a wait past its
deadline, remote retries one after another, writes through planted links, a closed stdout, ssh agent
forwarding, and invisible characters in listings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from sshd import Sshd, _client_config, _free_port, _keygen, _server_config

from conftest import Tmux, Workspace, base_env
from mam.calls import runner
from mam.calls.route import Route, remote_route
from mam.calls.transport import SshTransport

# -- 6. a wait ends at its deadline ---------------------------------------------------------------------------


def test_a_wait_against_a_hung_server_ends_at_its_deadline_not_after_mam_timeout(ws: Workspace) -> None:
    ws.write_registry("version: 1\nsessions:\n  - {name: a, server: live, status: running, agent: claude}\n")
    ws.herdr.start("live")
    ws.herdr.set_agents("live", [{"agent": "claude", "agent_status": "working", "cwd": "/repo", "name": "a",
                                  "pane_id": "w1:p1", "terminal_id": "term_1"}])
    ws.herdr.set_fault("live", "agent list", sleep=120)  # the server hangs: every listing call blocks
    env = {**ws.env, "MAM_TIMEOUT": "30"}
    began = time.monotonic()
    proc = ws.mam("wait", "a", "--until", "idle", "--timeout", "1", env=env, timeout=90)
    took = time.monotonic() - began
    assert proc.returncode == 1, proc.stderr
    assert "timed out after 1 s" in proc.stderr
    assert took < 10, f"a 1 s wait took {took:.1f} s"  # each poll used to wait the full MAM_TIMEOUT (30 s)


# -- 11. no ssh agent forwarding, whatever the user's ssh config says ------------------------------------------


@pytest.fixture
def forwarding_sshd(sshd: Sshd, tmp_path: Path) -> Sshd:
    """An sshd that would forward an agent (AllowAgentForwarding yes) and a client config that asks for it (the
    session's `sshd` is asked for its checks: installed, and its privilege separation folder made)."""
    if shutil.which("ssh-agent") is None:
        pytest.skip("needs ssh-agent")
    root = Path(tempfile.mkdtemp(prefix="mf", dir="/tmp"))
    port = _free_port()
    for key in ("host_ed25519", "user_ed25519"):
        _keygen(root / key)
    (root / "authorized_keys").write_text((root / "user_ed25519.pub").read_text())
    host_key = (root / "host_ed25519.pub").read_text().split()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    (root / "sshd_config").write_text(_server_config(root, port).replace("AllowAgentForwarding no",
                                                                          "AllowAgentForwarding yes"))
    _client_config(root / "ssh_config", root, port, root / "user_ed25519")
    config = (root / "ssh_config").read_text().replace("IdentityAgent none", f"IdentityAgent {root / 'agent.sock'}")
    (root / "ssh_config").write_text(config + "    ForwardAgent yes\n    ForwardX11 yes\n")
    home = tmp_path / "home"
    home.mkdir()
    server = Sshd(root, port, root / "ssh_config", root / "ssh_config", base_env(home))
    server.start()
    return server


def test_no_ssh_agent_is_forwarded_even_when_the_ssh_config_asks_for_it(forwarding_sshd: Sshd,
                                                                       tmp_path: Path) -> None:
    sshd = forwarding_sshd
    agent_sock = sshd.root / "agent.sock"
    agent = subprocess.run(["ssh-agent", "-a", str(agent_sock)], capture_output=True, text=True, timeout=30,
                           env=sshd.env, stdin=subprocess.DEVNULL)
    assert agent.returncode == 0, agent.stderr
    agent_pid = int(agent.stdout.split("SSH_AGENT_PID=")[1].split(";")[0])
    env = {**sshd.env, "SSH_AUTH_SOCK": str(agent_sock)}
    control = Path(tempfile.mkdtemp(prefix="mc", dir="/tmp")) / "ssh"
    try:
        # The config really forwards: ssh itself, without mam's options, hands the agent over.
        plain = sshd.ssh("-T", sshd.host, 'echo "agent=${SSH_AUTH_SOCK:-none}"', env=env)
        assert plain.returncode == 0 and "agent=/" in plain.stdout, (plain.stdout, plain.stderr)
        transport = SshTransport(sshd.host, control, 10, ssh_config=sshd.config_path)
        with remote_route(Route(transport, (), {})):
            result = runner.run(["sh", "-c", 'echo "agent=${SSH_AUTH_SOCK:-none} x=${DISPLAY:-none}"'],
                                timeout=30, env=env)
        assert (result.returncode, result.stdout) == (0, "agent=none x=none\n"), result
        assert "ForwardAgent=no" in transport.wrap(["true"]) and "ForwardX11=no" in transport.wrap(["true"])
    finally:
        sshd.close_masters(control)
        shutil.rmtree(control.parent, ignore_errors=True)
        os.kill(agent_pid, 15)
        sshd.stop()
        shutil.rmtree(sshd.root, ignore_errors=True)


# -- 12. invisible characters from a server are written out ---------------------------------------------------

HIDDEN = "\u00ad\U000e0041\U000e0069\u115f\u1160\u3164\uffa0\ue000\u0378"


def test_invisible_characters_of_a_listing_are_written_out_in_ls_and_status(ws: Workspace) -> None:
    ws.write_registry("version: 1\nsessions:\n  - {name: a, server: live, status: running, agent: claude}\n")
    ws.herdr.start("live")
    ws.herdr.set_agents("live", [{"agent": f"claude{HIDDEN}", "agent_status": "working", "cwd": f"/repo/{HIDDEN}x",
                                  "name": "a", "pane_id": "w1:p1", "terminal_id": "term_1"}])
    for args in (("ls", "--server", "live"), ("status",)):
        proc = ws.mam(*args)
        assert proc.returncode == 0, proc.stderr
        assert not any(ch in proc.stdout + proc.stderr for ch in HIDDEN), (args, proc.stdout)
        assert "\\xad" in proc.stdout or "\\u3164" in proc.stdout, (args, proc.stdout)
    listing = ws.mam("ls", "--server", "live").stdout
    for escape in ("\\xad", "\\U000e0041", "\\U000e0069", "\\u115f", "\\u1160", "\\u3164", "\\uffa0", "\\ue000",
                   "\\u0378"):
        assert escape in listing, (escape, listing)
    # JSON keeps the exact text (escaped as JSON does, never raw).
    doc = json.loads(ws.mam("ls", "--server", "live", "--json").stdout)
    assert HIDDEN in json.dumps(doc, ensure_ascii=False)


# -- 8. no write through a planted link ------------------------------------------------------------------------


def test_shim_install_replaces_a_planted_link_and_never_writes_its_target(ws: Workspace, tmp_path: Path) -> None:
    victim = tmp_path / "victim.sh"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    shim_dir = ws.root / ".mam" / "shim"
    shim_dir.mkdir(parents=True)
    (shim_dir / "tmux").symlink_to(victim)
    proc = ws.mam("shim", "install")
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "precious\n" and victim.stat().st_mode & 0o777 == 0o600
    shim = shim_dir / "tmux"
    assert not shim.is_symlink() and b"# mam shim:" in shim.read_bytes() and shim.stat().st_mode & 0o777 == 0o755


def test_shim_install_refuses_a_linked_shim_folder(ws: Workspace, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "tmux").write_text("precious\n")
    (ws.root / ".mam").mkdir()
    (ws.root / ".mam" / "shim").symlink_to(elsewhere)
    proc = ws.mam("shim", "install")
    assert proc.returncode == 1, proc.stderr
    assert "symbolic link" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["tmux"] and (elsewhere / "tmux").read_text() == "precious\n"


def test_skills_install_refuses_a_linked_skill_folder_and_writes_nothing(ws: Workspace, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    skills = ws.root / ".agents" / "skills"
    skills.mkdir(parents=True)
    shipped = sorted(p.name for p in (Path(__file__).parents[1] / "skills").iterdir() if (p / "SKILL.md").is_file())
    (skills / shipped[0]).symlink_to(elsewhere)
    for args in (("skills", "install"), ("skills", "install", "--force")):
        proc = ws.mam(*args)
        assert proc.returncode == 1, proc.stderr
        assert "symbolic link" in proc.stderr and "Traceback" not in proc.stderr
        assert list(elsewhere.iterdir()) == []
        assert sorted(p.name for p in skills.iterdir()) == [shipped[0]]  # nothing was written


# -- 9. a closed or full stdout: one line on stderr, the exit code always ----------------------------------------


def _mam_fds(ws: Workspace, *args: str, close: tuple[int, ...] = (), stdout: object = subprocess.PIPE
             ) -> tuple[int, str, str]:
    """`mam ARGS` with the descriptors `close` closed in the child (as `>&-` does) and `stdout` as given."""
    import sys

    def closing() -> None:
        for fd in close:
            os.close(fd)

    proc = subprocess.run([sys.executable, "-m", "mam", *args], env=ws.env, cwd=ws.root, stdin=subprocess.DEVNULL,
                          stdout=stdout, stderr=subprocess.PIPE, preexec_fn=closing, timeout=60)
    out = proc.stdout.decode() if isinstance(proc.stdout, bytes) else ""
    return proc.returncode, out, proc.stderr.decode()


def test_a_full_stdout_is_one_line_on_stderr_and_exit_1(ws: Workspace) -> None:
    with open("/dev/full", "w") as full:
        for args in (("--json", "status"), ("status",), ("--json", "version"), ("--json", "backends")):
            code, _, err = _mam_fds(ws, *args, stdout=full)
            assert code == 1, (args, err)
            assert err == "mam: cannot write the output: No space left on device\n", (args, err)


def test_a_closed_stdout_is_one_line_on_stderr_and_exit_1_before_anything_runs(ws: Workspace) -> None:
    code, _, err = _mam_fds(ws, "--json", "status", close=(1,))
    assert code == 1 and err.startswith("mam: standard output is closed: nothing was run\n"), err
    assert "Traceback" not in err
    code, _, err = _mam_fds(ws, "spawn", "x", "--", "sleep", "60", close=(1,))
    assert code == 1 and "standard output is closed" in err
    assert not ws.registry.exists()  # nothing ran: no row claimed


def test_a_closed_stderr_still_gets_the_json_document_and_the_exit_code(ws: Workspace) -> None:
    code, out, _ = _mam_fds(ws, "--json", "stop", "nosuch", close=(2,))
    assert code == 1
    assert json.loads(out)["error"]["code"] == "operation_failed"
    code, out, _ = _mam_fds(ws, "--json", "status", close=(2,))
    assert code == 0 and json.loads(out)["sessions"] == []
    code, _, _ = _mam_fds(ws, "--json", "status", close=(1, 2))
    assert code == 1


# -- 7. a failed batch is retried in parallel, within its one time limit ------------------------------------------


def _batch_route(sshd: Sshd, control: Path) -> Route:
    # A TMPDIR that does not exist there: the batch script's mktemp fails, so no frame parses and every call
    # is asked again on its own (what any batch whose frames do not parse goes through).
    transport = SshTransport(sshd.host, control, 10, ssh_config=sshd.config_path)
    return Route(transport, (), {"TMPDIR": "/nonexistent/mam-test"})


def _batched(route: Route, argvs: list[list[str]], timeout: float, env: dict[str, str]
             ) -> tuple[list[runner.CommandResult], float]:
    import threading

    from mam.calls.batch import Batch

    batch = Batch(expected=len(argvs))
    results: dict[int, runner.CommandResult] = {}

    def call(i: int) -> None:
        results[i] = batch.run(route, argvs[i], timeout=timeout, env=env)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(argvs))]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return [results[i] for i in range(len(argvs))], time.monotonic() - began


def test_a_failed_batch_of_hung_calls_is_retried_at_once_not_one_after_another(sshd: Sshd) -> None:
    control = Path(tempfile.mkdtemp(prefix="mb", dir="/tmp")) / "ssh"
    route = _batch_route(sshd, control)
    try:
        # The retry really happens, and each call gets its own answer.
        results, _ = _batched(route, [["echo", f"call {i}"] for i in range(4)], 20, sshd.env)
        assert [(r.returncode, r.stdout) for r in results] == [(0, f"call {i}\n") for i in range(4)]
        # Eight calls that hang, 3 s each: one time limit for all of them, not eight in a row (24 s).
        results, took = _batched(route, [["sleep", "60"] for _ in range(8)], 3, sshd.env)
        assert all(r.timed_out and r.timeout == 3 for r in results), results
        assert took < 12, f"8 hung calls took {took:.1f} s"
    finally:
        sshd.close_masters(control)
        shutil.rmtree(control.parent, ignore_errors=True)


# -- 5. a user's rule that backtracks: refused when it is known to, stopped when it is not ---------------------

SLOW_RULES = """schema: 1
kinds:
  slowkind:
    programs: [slowkind]
    rules:
      - id: slowkind.idle
        state: idle
        pattern: '{pattern}'
        lines: 5
"""


def test_a_rule_that_backtracks_is_stopped_by_the_time_limit_or_refused_with_its_line(ws: Workspace,
                                                                                      tmux: Tmux) -> None:
    server = tmux.name()
    (ws.root / ".mam").mkdir(exist_ok=True)
    states = ws.root / ".mam" / "states.yaml"
    # Polynomial, not nested: no static check can know it, and on a line of 1,000 `a`s it runs for hours.
    states.write_text(SLOW_RULES.format(pattern=".*a.*a.*a.*b"))
    proc = ws.mam("spawn", "slow", "--agent", "slowkind", "--server", server, "--command", sys.executable, "--",
                  "-c", "print('a' * 1000, flush=True); import time; time.sleep(600)")
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 20
    while "aaaa" not in tmux.run(server, "capture-pane", "-p", "-J", "-t", "slow").stdout:
        assert time.monotonic() < deadline, "the agent drew nothing"
        time.sleep(0.1)
    env = {**ws.env, "MAM_SCREEN_TIMEOUT": "1"}
    began = time.monotonic()
    proc = ws.mam("status", "--json", env=env, timeout=120)
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)["sessions"][0]
    assert entry["state"] == "unknown" and entry["evidence"]["rule"] == "slowkind.idle", entry
    assert "took more than 1 s" in entry["evidence"]["fact"], entry
    assert took < 30, f"status took {took:.1f} s"
    # wait ends too, at its own deadline and with the same reason.
    proc = ws.mam("wait", "slow", "--until", "idle", "--timeout", "2", env=env, timeout=120)
    assert proc.returncode == 1 and "took more than 1 s" in proc.stderr, proc.stderr
    # Nested repetition, which backtracks exponentially (34 `a`s: hours), is refused when the file is read:
    # the file, the line of the pattern, and why.
    states.write_text(SLOW_RULES.format(pattern="^(a+)+$"))
    proc = ws.mam("status", env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"{states}:8:" in proc.stderr and "backtrack without bound" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("pattern", "refused"), [
    (r"^(a+)+$", True), (r"(\w+\s*)+$", True), (r"(?:x{1,5}){5}", True), (r"(a|ab)+c", True),
    (r"(?:a|a)*", True), (r"((a+))*b", True),
    (r"(foo|bar)+", False), (r"(a++)+", False), (r"(?:\w+\s*)++", False), (r"[\w\s]+", False),
    (r"^([\w-]+ ?){0,2}>( .*)?$", False), (r"(\d+h\s*)?(\d+m\s*)?\d+s", False), (r".*a.*b", False),
])
def test_which_patterns_are_refused_as_backtracking(pattern: str, refused: bool) -> None:
    from mam.kinds.library import backtracking

    assert (backtracking(pattern) is not None) == refused


def test_no_shipped_rule_backtracks_and_the_time_limit_stops_a_slow_one() -> None:
    import re

    from mam.kinds.classify import classify_screen
    from mam.kinds.library import Kind, Library, Rule, backtracking, load_library

    shipped = load_library(None)
    assert [r.id for k in shipped.kinds.values() for r in k.rules if backtracking(r.pattern)] == []
    slow = Rule("slow.x", "idle", ".*a.*a.*a.*b", 5, re.compile(".*a.*a.*a.*b"))
    library = Library({"slow": Kind("slow", ("slow",), (), None, (slow,))})
    began = time.monotonic()
    verdict = classify_screen(library, "slow", "a" * 1000 + "\n", budget=0.5)
    assert (verdict.state, verdict.overtime) == ("unknown", "slow.x")
    assert time.monotonic() - began < 10
    # And the timer is gone afterwards: nothing fires later.
    import signal

    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_skills_install_refuses_a_linked_agents_folder_of_the_workspace(ws: Workspace, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ws.root / ".agents").symlink_to(elsewhere)  # a clone's planted link: the default dest runs through it
    proc = ws.mam("skills", "install", "--force")
    assert proc.returncode == 1 and "symbolic link" in proc.stderr, proc.stderr
    assert list(elsewhere.iterdir()) == []
