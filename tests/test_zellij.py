"""The zellij backend over a fake zellij: its session listing read from the text, never from exit codes."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import FAKES, Workspace
from mam_zellij.backend import parse_sessions


class Zellij:
    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def state(self, sessions: dict[str, Any], faults: dict[str, Any] | None = None) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        now = time.time() - 3723
        full = {name: {"created": now, "exited": False, "panes": [], **info} for name, info in sessions.items()}
        (self.dir / "fake-state.json").write_text(json.dumps({"sessions": full, "faults": faults or {}}))

    def sessions(self) -> dict[str, Any]:
        return dict(json.loads((self.dir / "fake-state.json").read_text())["sessions"])

    def calls(self) -> list[dict[str, Any]]:
        path = self.dir / "fake-calls.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def zellij(ws: Workspace, tmp_path: Path) -> Iterator[Zellij]:
    """The fake zellij's socket folder; every session is killed at the end, and its panes' programs with it
    (a restored `sleep 600` outlived its test)."""
    directory = tmp_path / "zellij-sock"
    ws.env.update({"ZELLIJ_SOCKET_DIR": str(directory), "MAM_BACKEND": "zellij"})
    yield Zellij(directory)
    if (directory / "fake-state.json").exists():
        subprocess.run([str(FAKES / "zellij"), "kill-all-sessions", "--yes"], env=ws.env, capture_output=True,
                       timeout=30)


def pane(pid: int, title: str, command: str | None = "claude", exited: bool = False, plugin: bool = False,
         **extra: Any) -> dict[str, Any]:
    """A pane in the fake's state: `command` is what it was started with (None: a shell pane)."""
    return {"id": pid, "plugin": plugin, "name": None, "title": title, "command": command.split() if command else None,
            "cwd": "/repo", "held": {"status": 0, "first_run": False} if exited else None, **extra}


def test_listing_text_is_classified_as_the_reference_says() -> None:
    text = ("my session with spaces [Created 2h 3m 4s ago] \n"
            "here [Created 5s ago] (current)\n"
            "old one [Created 1h 0m 0s ago] (EXITED - attach to resurrect)\n")
    assert parse_sessions(text, "") == {"my session with spaces": True, "here": True, "old one": False}
    assert parse_sessions("", "No active zellij sessions found.\n") == {}
    with pytest.raises(ValueError):
        parse_sessions("Error occurred: PermissionDenied\n", "")


def test_status_over_live_exited_and_missing_sessions(ws: Workspace, zellij: Zellij) -> None:
    zellij.state({"work": {"panes": [pane(1, "coder"), pane(2, "/bin/bash", None), pane(3, "gone", exited=True),
                                     pane(4, "status-bar", plugin=True), pane(5, "bash", "bash"),
                                     pane(6, "Pane #1", "htop"), pane(0, "myrepo", None)]},
                  "old": {"exited": True}, "two words": {}})
    ws.write_registry("sessions:\n  - {name: coder, backend: zellij, server: work, status: running}\n"
                      "  - {name: x, backend: zellij, server: old, status: running}\n"
                      "  - {name: y, backend: zellij, server: never, status: running}\n")
    env = {**ws.env, "ZELLIJ_SESSION_NAME": "old", "ZELLIJ": "0"}  # "(current)" must not hide EXITED
    doc = ws.mam_json("status", env=env)
    states = {s["server"]: (s["state"], s["agents"]) for s in doc["servers"]}
    assert states == {"work": ("up", 1), "old": ("down", 0), "never": ("down", 0)}
    rows = {s["name"]: s for s in doc["sessions"]}
    # zellij does not know the kind: `pane_command` is whatever process runs in the pane now.
    assert rows["coder"]["live"] == "alive" and rows["coder"]["agent"] is None
    rec = ws.mam_json("reconcile", env=env)
    assert [(d["class"], d["name"]) for d in rec["drifts"]] == [("A", "y"), ("A", "x")]  # shells are no agents
    for call in zellij.calls():
        assert call["argv"][:1] != ["attach"]


def test_no_sessions_is_a_confirmed_answer(ws: Workspace, zellij: Zellij) -> None:
    doc = ws.mam_json("ls", "--server", "anything")
    assert doc["server"]["state"] == "down"


@pytest.mark.parametrize("fault", [
    {"stderr": "Error occurred: PermissionDenied\n", "exit": 1},
    {"stdout": "garbage line\n", "exit": 0},
    {"sleep": 30, "exit": 0},
])
def test_unreadable_listings_are_unknown(ws: Workspace, zellij: Zellij, fault: dict[str, Any]) -> None:
    zellij.state({"work": {}}, faults={"list-sessions": fault})
    proc = ws.mam("ls", "--server", "work", "--json", env={**ws.env, "MAM_TIMEOUT": "1"})
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["server"]["state"] == "unknown"


def test_session_not_found_text_with_exit_0_is_not_up(ws: Workspace, zellij: Zellij) -> None:
    zellij.state({"a": {}, "b": {}}, faults={"list-sessions": {
        "stdout": "target [Created 1s ago] \na [Created 1s ago] \n", "exit": 0}})
    proc = ws.mam("ls", "--server", "target", "--json")
    assert json.loads(proc.stdout)["server"]["state"] == "unknown"  # the pane listing said "not found"


def test_bootstrap_scrubs_and_is_idempotent(ws: Workspace, zellij: Zellij) -> None:
    env = {**ws.env, "CLAUDECODE": "1", "ZELLIJ": "0", "ZELLIJ_SESSION_NAME": "outer", "TMUX": "/x,1,0",
           "CLAUDE_CONFIG_DIR": "/cfg"}
    doc = ws.mam_json("bootstrap", "--server", "fresh", env=env)
    assert doc["started"] is True
    attaches = [c for c in zellij.calls() if c["argv"][:1] == ["attach"]]
    assert [c["argv"] for c in attaches] == [["attach", "--create-background", "fresh"]]
    for marker in ("CLAUDECODE", "ZELLIJ", "ZELLIJ_SESSION_NAME", "TMUX"):
        assert marker not in attaches[0]["env"]
    assert attaches[0]["env"]["CLAUDE_CONFIG_DIR"] == "/cfg"
    again = ws.mam_json("bootstrap", "--server", "fresh", env=env)
    assert again["started"] is False
    assert len([c for c in zellij.calls() if c["argv"][:1] == ["attach"]]) == 1


def test_spawn_and_stop_a_pane(ws: Workspace, zellij: Zellij) -> None:
    env = {**ws.env, "CLAUDECODE": "1"}
    doc = ws.mam_json("spawn", "helper", "--command", "sleep 600", "--server", "work", "--cwd", str(ws.root), env=env)
    assert doc["session"]["live"] == "alive" and doc["session"]["cwd"] == str(ws.root)
    attaches = [c for c in zellij.calls() if c["argv"][:1] == ["attach"]]
    assert len(attaches) == 1 and "CLAUDECODE" not in attaches[0]["env"]
    runs = [c["argv"] for c in zellij.calls() if c["argv"][2:3] == ["run"]]
    assert runs == [["--session", "work", "run", "--name", "helper", "--cwd", str(ws.root), "--", "sleep", "600"]]
    assert ws.mam_json("stop", "helper")["status"] == "stopped"
    assert [(p["id"], p["title"]) for p in zellij.sessions()["work"]["panes"] if not p["plugin"]] == [
        (0, "Pane #1")]
    assert ws.mam_json("status")["sessions"][0]["live"] == "absent"


def test_a_session_name_that_forges_listing_lines_makes_the_answer_unknown(ws: Workspace, zellij: Zellij) -> None:
    ws.mam_json("spawn", "coder", "--command", "sleep 600", "--server", "vic", "--cwd", str(ws.root))
    # zellij refuses only empty, ".", ".." and "/" in a session name: a newline is allowed, and a name can hold
    # whole listing lines, one of them saying that vic has exited.
    forged = "a [Created 1s ago]\nvic [Created 1s ago] (EXITED - attach to resurrect)\nb"
    made = subprocess.run(["zellij", "attach", "-b", forged], env=ws.env, capture_output=True, text=True, timeout=20)
    assert made.returncode == 0, made.stderr
    try:
        state = ws.mam_json("status")["servers"][0]
        assert state["state"] == "unknown", state
        ws.mam_json("reconcile", "--apply")
        assert yaml.safe_load(ws.registry.read_text())["sessions"][0]["status"] == "running"
    finally:
        subprocess.run(["zellij", "delete-session", "--force", forged], env=ws.env, capture_output=True, timeout=20)
    assert ws.mam_json("status")["servers"][0]["state"] == "up"
    assert ws.mam_json("stop", "coder")["status"] == "stopped"


def test_a_listing_that_names_a_session_twice_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_sessions("vic [Created 1s ago] \nvic [Created 1s ago] (EXITED - attach to resurrect)\n", "")


def test_a_live_session_zellij_says_for_a_moment_it_cannot_find_is_unknown(ws: Workspace, zellij: Zellij) -> None:
    # The real zellij's client counts a session only when its server answers a connection check at once: a busy
    # new server can be missed, and `--session S action ...` then says no session runs while `ls` lists S.
    zellij.state({"work": {"panes": [pane(1, "coder")]}},
                 faults={"list-panes": {"stderr": "There is no active session!\n", "exit": 1}})
    ws.write_registry("sessions:\n  - {name: coder, backend: zellij, server: work, status: running}\n")
    doc = ws.mam_json("status")  # status says so on stderr and exits 0
    assert doc["servers"][0]["state"] == "unknown" and doc["sessions"][0]["live"] == "unknown"


@pytest.mark.parametrize(("silent", "live"), [(2, "alive"), (3, "unknown")])
def test_a_listing_a_busy_server_left_silent_is_asked_again(ws: Workspace, zellij: Zellij, silent: int,
                                                            live: str) -> None:
    # zellij lets an action's client go after 1 s (zellij-server route.rs ACTION_COMPLETION_TIMEOUT): on a busy
    # server `list-panes` prints nothing and exits 0. That is no answer: asked again, three times in all; past
    # that the session is unknown, never a session without agents.
    zellij.state({"work": {"panes": [pane(1, "coder")]}},
                 faults={"list-panes": {"stdout": "", "stderr": "", "exit": 0, "times": silent}})
    ws.write_registry("sessions:\n  - {name: coder, backend: zellij, server: work, status: running}\n")
    doc = ws.mam_json("status")
    assert doc["sessions"][0]["live"] == live
    asked = len([c for c in zellij.calls() if "list-panes" in c["argv"]])
    assert asked == 3 if live == "unknown" else asked > silent  # the listing, then what reads the panes after


@pytest.mark.parametrize("version", ["0.44.1", "0.45.1"])
def test_both_zellij_releases_mam_supports(ws: Workspace, zellij: Zellij, version: str) -> None:
    ws.env["FAKE_ZELLIJ_VERSION"] = version
    backends = {b["name"]: b for b in ws.mam_json("backends")["backends"]}
    assert (backends["zellij"]["version"], backends["zellij"]["supported"]) == (f"zellij {version}", True)
    proc = ws.mam("spawn", "helper", "--json", "--server", "work", "--cwd", str(ws.root), "--command", "sleep 600")
    assert proc.returncode == 0, proc.stderr
    assert ws.mam_json("send", "helper", "hi", "--enter")["enter"] is True
    assert ws.mam_json("stop", "helper")["status"] == "stopped"
    # What differs: an action for the focused pane of a session no client is attached to.
    renamed = subprocess.run(["zellij", "--session", "work", "action", "rename-pane", "x"], env=ws.env,
                             capture_output=True, text=True, timeout=20)
    assert renamed.returncode == (2 if version == "0.45.1" else 0)
    assert ("no client is attached" in renamed.stderr) == (version == "0.45.1")


def test_backends_says_a_zellij_release_mam_is_not_tested_against(ws: Workspace, zellij: Zellij) -> None:
    ws.env["FAKE_ZELLIJ_VERSION"] = "0.43.1"
    backends = {b["name"]: b for b in ws.mam_json("backends")["backends"]}
    assert (backends["zellij"]["version"], backends["zellij"]["supported"]) == ("zellij 0.43.1", False)


def test_a_run_that_prints_no_pane_id_finds_its_pane_by_its_name(ws: Workspace, zellij: Zellij) -> None:
    # A busy zellij server finishes `run` after zellij's 1 s wait for the action: it prints nothing, exits 0, and
    # the pane comes all the same (seen on the real one under load).
    zellij.state({}, faults={"run-timeout": {}})
    proc = ws.mam("spawn", "helper", "--json", "--server", "work", "--cwd", str(ws.root), "--command", "sleep 600")
    assert proc.returncode == 0, proc.stderr
    listed = [p for p in zellij.sessions()["work"]["panes"] if p["title"] == "helper"]
    assert json.loads(proc.stdout)["session"]["pane_id"] == str(listed[0]["id"])
    assert yaml.safe_load(ws.registry.read_text())["sessions"][0]["status"] == "running"
