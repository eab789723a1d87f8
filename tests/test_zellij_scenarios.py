"""The zellij backend's scenarios, each run twice through the `zj` fixture: on the fake and on the real zellij
(the pinned release; skipped with the reason when it is not installed). A fake easier than the program shows up
here as a test that passes on one and fails on the other.

The first tests hold zellij itself to what its source says (they are what keeps the fake honest); the others
drive mam over it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Workspace, ZellijKit
from mam.api import Agent, CallContext, Failure
from mam_zellij.backend import ZellijBackend

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")


def ctx(zj: ZellijKit) -> CallContext:
    return CallContext(timeout=20, env=zj.env)


def spawn(ws: Workspace, name: str, *args: str, server: str = "work") -> dict[str, Any]:
    """`mam spawn NAME ... --json` (before any `--`: after it, words are the command's)."""
    proc = ws.mam("spawn", name, "--json", "--server", server, "--cwd", str(ws.root), *args)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def status(ws: Workspace) -> dict[str, Any]:
    """`mam status --json`, asked again for up to 10 s while the server is `unknown`: a busy real zellij server
    can miss its own client's connection check, which then says for a moment that no session runs (mam reads
    that as unknown, never as down). An answer that stays unknown fails the test."""
    deadline = time.monotonic() + 10
    while True:
        doc = ws.mam_json("status")
        if all(s["state"] != "unknown" for s in doc["servers"]) or time.monotonic() > deadline:
            return doc
        time.sleep(0.3)


def row(ws: Workspace, name: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = yaml.safe_load(ws.registry.read_text())["sessions"]
    return next(r for r in rows if r["name"] == name)


# zellij as its source says it is.

def _id_named(zj: ZellijKit, name: str) -> int:
    """The id of the terminal pane titled `name`, once it is listed."""
    def named() -> list[int]:
        return [p["id"] for p in zj.terminals("raw") if p["title"] == name]

    zj.wait(named, f"a pane named {name} is listed")
    return named()[0]


def test_first_pane_is_terminal_0_and_run_prints_ids_never_reused(zj: ZellijKit) -> None:
    zj.start("raw")
    first = zj.terminals("raw")
    assert [(p["id"], p["title"], p["terminal_command"], p["is_held"]) for p in first] == [
        (0, "Pane #1", None, False)]
    made = zj.run("--session", "raw", "run", "--name", "one", "--", "sleep", "600")
    # On a busy server zellij lets the action's client go after 1 s and it prints nothing, exit 0 (the silent answer
    # mam handles by listing the panes): the id is then read as mam reads it, by the pane's name.
    assert (made.returncode, made.stderr) == (0, "") and made.stdout in ("terminal_1\n", "")
    assert _id_named(zj, "one") == 1
    assert zj.run("--session", "raw", "action", "close-pane", "--pane-id", "terminal_1").returncode == 0
    again = zj.run("--session", "raw", "run", "--name", "two", "--", "sleep", "600")
    assert again.stdout in ("terminal_2\n", "")
    assert _id_named(zj, "two") == 2  # a counter: terminal_1 is never given again
    listed = {p["id"]: p for p in zj.terminals("raw")}
    assert sorted(listed) == [0, 2]
    assert listed[2]["title"] == "two" and listed[2]["terminal_command"] == "sleep 600"
    zj.wait(lambda: {p["id"]: p for p in zj.terminals("raw")}[2].get("pane_command") == "sleep 600",
            "pane_command is the command line of the pane's process")


def test_actions_on_a_pane_that_does_not_exist_are_silent(zj: ZellijKit) -> None:
    zj.start("raw")
    for action in (["write-chars", "--pane-id", "terminal_9", "hello"], ["write", "--pane-id", "terminal_9", "13"],
                   ["close-pane", "--pane-id", "terminal_9"]):
        done = zj.run("--session", "raw", "action", *action)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), action
    dump = zj.run("--session", "raw", "action", "dump-screen", "--pane-id", "terminal_9")
    assert (dump.returncode, dump.stdout, dump.stderr) == (0, "\n", "")


def test_run_names_the_pane_and_no_title_the_program_sets_replaces_it(zj: ZellijKit) -> None:
    zj.start("raw")
    named = zj.run("--session", "raw", "run", "--name", "coder", "--", "sh", "-c",
                   r"printf '\033]0;Claude Code\007'; exec sleep 600").stdout.strip()
    unnamed = zj.run("--session", "raw", "run", "--", "sleep", "601").stdout.strip()
    time.sleep(1)  # the title is drawn
    titles = {f"terminal_{p['id']}": p["title"] for p in zj.terminals("raw")}
    assert (titles[named], titles[unnamed]) == ("coder", "sleep 601")


def test_session_not_found_by_the_number_of_sessions_alive(zj: ZellijKit) -> None:
    none = zj.run("--session", "ghost", "action", "list-panes", "--json")
    assert (none.returncode, none.stdout, none.stderr) == (1, "", "There is no active session!\n")
    zj.start("one")
    single = zj.run("--session", "ghost", "action", "list-panes", "--json")
    assert (single.returncode, single.stdout) == (1, "")
    assert single.stderr == "Session 'ghost' not found. The following sessions are active:\none\n"
    zj.start("two")
    several = zj.run("--session", "ghost", "action", "list-panes", "--json")
    assert several.returncode == 0  # zellij's listing exits 0 before its own exit 1
    assert several.stderr == "Session 'ghost' not found. The following sessions are active:\n"
    assert "one" in several.stdout and "two" in several.stdout


def test_a_resurrected_session_brings_command_panes_back_suspended(zj: ZellijKit) -> None:
    zj.start("res")
    zj.run("--session", "res", "run", "--name", "coder", "--", "sh", "-c", "exec sleep 600", check=True)
    zj.serialized("res", "coder")
    zj.run("kill-session", "res", check=True)
    zj.wait(lambda: "res" not in zj.live(), "killed")
    assert "res [Created" in zj.run("list-sessions", "-n").stdout  # EXITED, resurrectable
    zj.start("res")
    zj.wait(lambda: any(p["title"] == "coder" for p in zj.terminals("res")), "the named pane comes back")
    back = next(p for p in zj.terminals("res") if p["title"] == "coder")
    assert (back["is_held"], back["exited"], back["exit_status"]) == (True, False, None)
    assert "pane_command" not in back  # nothing runs in it
    assert back["terminal_command"] == "sleep 600"  # the command line its process had, not the one run gave
    zj.run("kill-session", "res", check=True)
    zj.wait(lambda: "res" not in zj.live(), "killed")
    zj.start("res", "--force-run-commands")
    zj.wait(lambda: any(p["title"] == "coder" and not p["is_held"] for p in zj.terminals("res")),
            "with -f the command runs again")


# mam over zellij.

def test_spawn_lists_the_pane_zellij_printed_and_never_the_shell(ws: Workspace, zj: ZellijKit) -> None:
    doc = spawn(ws, "helper", "--command", "sleep 600")
    assert doc["session"]["live"] == "alive"
    ours = [p for p in zj.terminals("work") if p["title"] == "helper"]
    assert len(ours) == 1 and ours[0]["id"] != 0
    assert row(ws, "helper")["pane"]["id"] == str(ours[0]["id"]) == doc["session"]["pane_id"]
    doc = status(ws)
    assert [(s["name"], s["live"]) for s in doc["sessions"]] == [("helper", "alive")]
    assert ws.mam_json("reconcile")["drifts"] == []  # terminal_0, the session's shell, is no agent


def test_an_agent_that_sets_its_title_stays_listed(ws: Workspace, zj: ZellijKit) -> None:
    spawn(ws, "coder", "--command", "sh", "--", "-c", r"printf '\033]0;Claude Code\007'; exec sleep 600")
    time.sleep(0.5)  # the title is drawn
    sessions = status(ws)["sessions"]
    assert [(s["name"], s["live"]) for s in sessions] == [("coder", "alive")]


def test_state_send_and_stop(ws: Workspace, zj: ZellijKit) -> None:
    spawn(ws, "calm", "--agent", "codex", "--command", sys.executable, "--", STANDIN, "codex", "idle")
    deadline = time.monotonic() + 30
    while True:
        entry = status(ws)["sessions"][0]
        if entry["state"] == "idle" or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert entry["state"] == "idle" and entry["agent"] == "codex", entry
    assert ws.mam_json("send", "calm", "hello there", "--enter")["enter"] is True
    pane = row(ws, "calm")["pane"]["id"]
    zj.wait(lambda: "got: hello there" in zj.run("--session", "work", "action", "dump-screen", "--pane-id",
                                                 f"terminal_{pane}").stdout, "the text arrived")
    assert ws.mam_json("stop", "calm")["status"] == "stopped"
    assert all(p["title"] != "calm" for p in zj.terminals("work"))
    assert status(ws)["sessions"][0]["live"] == "absent"


def test_a_script_agent_is_not_reported_as_its_interpreter(ws: Workspace, zj: ZellijKit) -> None:
    spawn(ws, "calm", "--agent", "codex", "--command", sys.executable, "--", STANDIN, "codex", "idle")
    ws.write_registry(ws.registry.read_text().replace("agent: codex", "agent: null"))
    listed = ws.mam_json("ls", "--server", "work")["agents"]
    assert [(a["name"], a["agent"]) for a in listed] == [("calm", None)]


def test_send_to_a_pane_that_closed_says_so(ws: Workspace, zj: ZellijKit) -> None:
    spawn(ws, "gone", "--command", "sleep 600")
    pane = row(ws, "gone")["pane"]["id"]
    stale = Agent(name="gone", pane_id=pane)
    zj.run("--session", "work", "action", "close-pane", "--pane-id", f"terminal_{pane}", check=True)
    sent = ZellijBackend().send_text("work", stale, "hello", True, ctx(zj))
    assert not sent.ok and f"terminal_{pane} is gone" in sent.message and "nothing was sent" in sent.message
    proc = ws.mam("send", "gone", "hello")
    assert proc.returncode == 1 and "gone is not running" in proc.stderr


def test_a_pane_that_closed_is_never_read_as_a_screen(ws: Workspace, zj: ZellijKit) -> None:
    spawn(ws, "gone", "--command", "sleep 600")
    spawn(ws, "here", "--command", "sleep 600")
    gone, here = (Agent(name=n, pane_id=row(ws, n)["pane"]["id"]) for n in ("gone", "here"))
    zj.run("--session", "work", "action", "close-pane", "--pane-id", f"terminal_{gone.pane_id}", check=True)
    captured = ZellijBackend().capture_panes("work", (gone, here), ctx(zj))
    assert not isinstance(captured, Failure)
    assert sorted(captured) == ["here"]  # zellij dumps the missing pane as an empty line: never read
    assert captured["here"].command == "sleep 600"


def test_send_to_a_held_pane_never_runs_it_again(ws: Workspace, zj: ZellijKit) -> None:
    spawn(ws, "short", "--command", "sh", "--", "-c", "sleep 1")
    pane = row(ws, "short")["pane"]["id"]
    zj.wait(lambda: any(p["id"] == int(pane) and p["exited"] for p in zj.terminals("work")), "its program ends")
    stale = Agent(name="short", pane_id=pane)
    sent = ZellijBackend().send_text("work", stale, "", True, ctx(zj))
    assert not sent.ok and "has exited" in sent.message
    time.sleep(0.5)
    assert next(p for p in zj.terminals("work") if p["id"] == int(pane))["exited"] is True  # not run again


def test_reconcile_keeps_how_a_held_pane_ended_and_its_last_lines(ws: Workspace, zj: ZellijKit) -> None:
    spawn(ws, "dying", "--command", "sh", "--", "-c", "echo loading; echo out of memory; sleep 4; exit 4")
    pane = row(ws, "dying")["pane"]["id"]
    zj.wait(lambda: any(p["id"] == int(pane) and p["exited"] for p in zj.terminals("work")), "its program ends")
    doc = ws.mam_json("reconcile", "--apply")
    assert [d["class"] for d in doc["drifts"]] == ["A"]
    dead = row(ws, "dying")
    assert dead["status"] == "terminated" and dead["exit_status"] == 4
    assert dead["last_output"][-2:] == ["loading", "out of memory"]
    entry = next(s for s in status(ws)["sessions"] if s["name"] == "dying")
    assert entry["exit_status"] == 4 and entry["last_output"][-1] == "out of memory"


def test_a_killed_session_is_down_and_restore_brings_the_agent_back(ws: Workspace, zj: ZellijKit) -> None:
    spawn(ws, "helper", "--command", "sleep 600")
    zj.serialized("work", "helper")
    zj.run("kill-session", "work", check=True)
    zj.wait(lambda: "work" not in zj.live(), "killed")
    doc = status(ws)
    assert doc["servers"][0]["state"] == "down" and doc["sessions"][0]["live"] == "absent"
    refused = ws.mam("send", "helper", "hi")
    assert refused.returncode == 1 and "is down" in refused.stderr
    restored = ws.mam_json("restore", "helper")["agents"][0]
    assert restored["outcome"] == "restored" and restored["bootstrap"] is True, restored
    # The resurrected session brought helper's pane back suspended (Enter in it would start a second helper);
    # restore closed it and started one: one pane runs `sleep 600`, the one restore names.
    named = [p for p in zj.terminals("work") if p["terminal_command"] == "sleep 600"]
    assert [(p["title"], p["is_held"], p["exited"]) for p in named] == [("helper", False, False)], named
    assert restored["pane_id"] == str(named[0]["id"])
    assert status(ws)["sessions"][0]["live"] == "alive"


@pytest.mark.parametrize("count", [1, 2])
def test_a_session_not_found_is_never_up(ws: Workspace, zj: ZellijKit, count: int) -> None:
    for i in range(count):
        zj.start(f"other{i}")
    doc = ws.mam_json("ls", "--server", "work")
    assert doc["server"]["state"] == "down"
