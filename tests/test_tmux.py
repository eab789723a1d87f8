"""The tmux backend against real tmux servers, each on its own socket under a private TMUX_TMPDIR."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from conftest import Tmux, Workspace

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")


def test_two_servers_one_killed(ws: Workspace, tmux: Tmux) -> None:
    live, dead = tmux.name(), tmux.name()
    tmux.agent(live, "alpha", "/tmp")
    tmux.agent(live, "beta")
    tmux.agent(dead, "gamma")
    ws.write_registry(f"sessions:\n"
                      f"  - {{name: alpha, backend: tmux, server: {live}, status: running}}\n"
                      f"  - {{name: gamma, backend: tmux, server: {dead}, status: running}}\n")
    tmux.run(dead, "kill-server")
    doc = ws.mam_json("status")
    states = {s["server"]: (s["state"], s["agents"]) for s in doc["servers"]}
    assert states == {live: ("up", 2), dead: ("down", 0)}
    rows = {s["name"]: s for s in doc["sessions"]}
    assert rows["alpha"]["live"] == "alive" and rows["alpha"]["cwd"] == "/tmp"
    assert rows["alpha"]["pane_id"].startswith("%")
    assert rows["gamma"]["live"] == "absent"
    rec = ws.mam_json("reconcile")
    assert [(d["class"], d["name"]) for d in rec["drifts"]] == [("A", "gamma"), ("B", "beta")]
    assert rec["confirmed"] is True


def test_stopped_server_is_unknown_and_others_answer(ws: Workspace, tmux: Tmux) -> None:
    frozen, fine = tmux.name(), tmux.name()
    tmux.agent(frozen, "ice")
    tmux.agent(fine, "fire")
    pid = int(tmux.run(frozen, "display-message", "-p", "#{pid}").stdout)
    ws.write_registry(f"sessions:\n  - {{name: ice, backend: tmux, server: {frozen}, status: running}}\n"
                      f"  - {{name: fire, backend: tmux, server: {fine}, status: running}}\n")
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        doc = ws.mam_json("status", env={**ws.env, "MAM_TIMEOUT": "1"})
        elapsed = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    states = {s["server"]: s for s in doc["servers"]}
    assert states[frozen]["state"] == "unknown" and states[frozen]["error"]["kind"] == "timeout"
    assert states[fine]["state"] == "up" and states[fine]["agents"] == 1
    assert elapsed < 20


def test_bad_socket_paths_are_unknown_not_down(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    long_dir = tmp_path / ("x" * 120)
    long_dir.mkdir()
    for tmpdir in (str(afile), str(long_dir)):
        doc = ws.mam_json("status", "--server", "s1", env={**ws.env, "TMUX_TMPDIR": tmpdir})
        server = doc["servers"][0]
        assert server["state"] == "unknown", (tmpdir, server)
        assert server["agents"] is None


def test_paths_with_newlines_and_separator_do_not_break_the_listing(ws: Workspace, tmux: Tmux,
                                                                    tmp_path: Path) -> None:
    server = tmux.name()
    odd = tmp_path / "we\nird\x1fdir\n$9\x1fx"
    odd.mkdir()
    tmux.agent(server, "first", str(odd))
    tmux.agent(server, "second", "/tmp")
    tmux.agent(server, "third", str(odd))
    doc = ws.mam_json("ls", "--server", server)
    assert [a["name"] for a in doc["agents"]] == ["first", "second", "third"]
    assert doc["agents"][0]["cwd"] == str(odd)


def test_bootstrap_scrubs_what_the_pane_sees(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    env = {**ws.env, "CLAUDECODE": "1", "CLAUDE_CODE_CHILD_SESSION": "1", "TMUX": "/tmp/tmux-0/default,1,0",
           "TMUX_PANE": "%9", "CLAUDE_CONFIG_DIR": "/cfg", "HERDR_PANE_ID": "w1:p1"}
    doc = ws.mam_json("bootstrap", "--server", server, env=env)
    assert doc["started"] is True
    pane = tmux.pane_env(server, "=_mam_keepalive")
    for marker in ("CLAUDECODE", "CLAUDE_CODE_CHILD_SESSION", "HERDR_PANE_ID"):
        assert marker not in pane
    assert pane["TMUX"] != env["TMUX"]  # tmux sets its own for the pane, pointing at the new server
    assert pane["CLAUDE_CONFIG_DIR"] == "/cfg"
    assert ws.mam_json("bootstrap", "--server", server, env=env)["started"] is False
    listing = ws.mam_json("ls", "--server", server)
    assert listing["server"]["state"] == "up" and listing["agents"] == []  # the keep-alive is no agent


def test_queries_create_no_socket_and_start_no_server(ws: Workspace, tmux: Tmux) -> None:
    ws.write_registry("sessions:\n  - {name: a, backend: tmux, server: never-started, status: running}\n")
    before = tmux.sockets()
    for args in (["status"], ["reconcile"], ["reconcile", "--apply"], ["ls", "--server", "never-started"],
                 ["status", "--server", "other-one"]):
        proc = ws.mam(*args, "--json")
        assert proc.returncode == 0, (args, proc.stderr)
    assert tmux.sockets() == before
    doc = json.loads(ws.mam("status", "--json").stdout)
    assert doc["servers"][0]["state"] == "down"


def _table(*listening: tuple[str, str]) -> str:
    lines = ["Num       RefCount Protocol Flags    Type St Inode Path"]
    lines += [f"0000000000000000: 00000002 00000000 00010000 0001 01 {inode} {path}" for inode, path in listening]
    return "\n".join(lines) + "\n"


def test_a_namespace_whose_processes_end_while_mam_looks_is_left_out_not_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox's short-lived command (another network namespace) may end between mam's listing of the
    namespaces and its read of their socket tables: that namespace is listed again, and left out once no
    process is in it; a down server stays down, and a listener found elsewhere is still found."""
    from mam_tmux import backend

    path = "/tmp/tmux-0/work"
    tables = {"/proc/1/net/unix": _table(("77", path)), "/proc/9/net/unix": None}
    listings = [{"net:[1]": ["1"], "net:[2]": ["9"]}, {"net:[1]": ["1"]}]
    monkeypatch.setattr(backend, "net_namespaces", lambda **_: listings.pop(0))
    monkeypatch.setattr(backend, "read_text", lambda p, **_: tables[p])
    assert backend._listening_inodes(path, {}, 5.0) == {"77"} and not listings
    # Still there, still unreadable (another user's sandbox): mam cannot tell, so never down.
    listings[:] = [{"net:[1]": ["1"], "net:[2]": ["9"]}, {"net:[2]": ["9"]}]
    assert backend._listening_inodes(path, {}, 5.0) is None and not listings
