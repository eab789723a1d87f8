"""Issue 30 (fourth trust round), points 5 and 9: `mam stop` closes only what mam made, whatever a registry row
names; and a stop whose row cannot be written afterwards (a full disk) says that the agent is stopped, and is
never undone by `restore --all`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Tmux, Workspace, ZellijKit, fill, mounted_tmpfs
from mam.commands.lifecycle import stop_document
from mam.servers.app import App
from mam.util.errors import MamError
from mam_tmux.backend import TmuxBackend

STAND_IN = "sh -c 'exec sleep 600'"


def _rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}


def _add_row(ws: Workspace, **row: Any) -> None:
    """A row written by hand (or come with a clone): it names whatever it likes."""
    ws.registry.parent.mkdir(parents=True, exist_ok=True)
    text = ws.registry.read_text() if ws.registry.exists() else "version: 1\nsessions:\n"
    ws.registry.write_text(text + "- " + json.dumps(row) + "\n")


def _has(tmux: Tmux, server: str, session: str) -> bool:
    return tmux.run(server, "has-session", "-t", f"={session}", check=False).returncode == 0


# -- 5. a session mam did not make is never closed without --force -------------------------------------------


def test_a_users_own_tmux_session_named_by_a_row_is_never_closed_without_force(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("spawn", "keeper", "--server", server, "--command", STAND_IN)  # mam's own: --all closes it
    tmux.agent(server, "work")  # the user's own session on that server: no @mam_pane
    _add_row(ws, name="work", backend="tmux", server=server, status="running", agent="claude",
             pane={"cwd": str(ws.root)})
    before = _rows(ws)["work"]

    proc = ws.mam("stop", "work")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith(f"mam: tmux session work on server {server} was not started by mam (it has no "
                                  "@mam_pane): left running; its registry row is left as it was"), proc.stderr
    assert "`mam stop work --force` closes it" in proc.stderr
    assert _has(tmux, server, "work") and _rows(ws)["work"] == before

    proc = ws.mam("stop", "--all", "--yes", "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    outcomes = {a["name"]: a["outcome"] for a in doc["agents"]}
    assert outcomes == {"keeper": "stopped", "work": "left"}
    assert doc["counts"] == {"stopped": 1, "terminated": 0, "failed": 0, "left": 1}
    assert _has(tmux, server, "work") and not _has(tmux, server, "keeper")
    assert _rows(ws)["work"] == before
    text = ws.mam("stop", "--all", "--yes")  # the same, in words: the row that was left says why
    assert text.returncode == 1 and f"work on tmux server {server}: left (tmux session work" in text.stdout

    proc = ws.mam("forget", "work")  # registered running: refused, and nothing is closed either way
    assert proc.returncode == 1 and "forget closes nothing" in proc.stderr, proc.stderr
    proc = ws.mam("forget", "work", "--force")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"forgot work (tmux server {server}, running); whatever runs under that name is left " \
                          "running\n"
    assert _has(tmux, server, "work") and "work" not in _rows(ws)

    _add_row(ws, name="work", backend="tmux", server=server, status="running", agent="claude",
             pane={"cwd": str(ws.root)})
    assert ws.mam_json("restore", "work")["agents"][0]["outcome"] == "running"  # nothing started or closed
    assert ws.mam_json("restore", "--all")["agents"] == []
    assert _has(tmux, server, "work")

    doc = ws.mam_json("stop", "work", "--force")  # the user names it: closed
    assert (doc["status"], doc["message"]) == ("stopped", "closed tmux session work")
    assert not _has(tmux, server, "work") and _rows(ws)["work"]["status"] == "stopped"


def test_restore_never_closes_a_users_ended_session_that_holds_the_name(ws: Workspace, tmux: Tmux) -> None:
    """A user's session whose program ended, kept by remain-on-exit, is not an agent: restore starts the row's
    agent in its place only after closing it, which it never does for a session mam did not make."""
    server = tmux.name()
    tmux.run(server, "new-session", "-d", "-s", "keep", "true", ";", "set-option", "-w", "remain-on-exit", "on")
    _add_row(ws, name="done", backend="tmux", server=server, status="terminated",
             spec={"command": "sleep 600", "args": [], "cwd": str(ws.root), "env_names": []})
    tmux.run(server, "rename-session", "-t", "=keep", "done")
    proc = ws.mam("restore", "done", "--trust-spec", "--json")
    assert proc.returncode == 1, proc.stderr
    agent = json.loads(proc.stdout)["agents"][0]
    assert agent["outcome"] == "failed" and "duplicate session: done" in agent["message"], agent
    assert _has(tmux, server, "done")


def test_stop_all_force_is_refused(ws: Workspace) -> None:
    proc = ws.mam("stop", "--all", "--yes", "--force")
    assert proc.returncode == 2
    assert proc.stderr.startswith("mam: --force is for one NAME you give, not for --all"), proc.stderr


def test_zellij_panes_mam_did_not_name_are_left_open(ws: Workspace, zj: ZellijKit) -> None:
    zj.start("work")
    # The user's own panes: a command pane titled after its command (its program ended: zellij holds it), and
    # the session's shell pane, which they renamed.
    zj.run("--session", "work", "run", "--", "false", check=True)
    zj.wait(lambda: any(p["title"] == "false" and p["exited"] for p in zj.terminals("work")), "false ends")
    shell = next(p for p in zj.terminals("work") if not p.get("terminal_command"))
    zj.run("--session", "work", "action", "rename-pane", "--pane-id", f"terminal_{shell['id']}", "notes", check=True)
    zj.wait(lambda: any(p["title"] == "notes" for p in zj.terminals("work")), "the rename shows")
    for name in ("false", "notes"):
        _add_row(ws, name=name, backend="zellij", server="work", status="running")
    before = _rows(ws)

    proc = ws.mam("stop", "false")
    assert proc.returncode == 1, proc.stderr
    assert "is titled false but was not named by mam" in proc.stderr and "left open" in proc.stderr, proc.stderr
    proc = ws.mam("stop", "--all", "--yes", "--json")
    assert proc.returncode == 1, proc.stderr
    assert {a["name"]: a["outcome"] for a in json.loads(proc.stdout)["agents"]} == {"false": "left", "notes": "left"}
    titles = [p["title"] for p in zj.terminals("work")]
    assert "false" in titles and "notes" in titles and _rows(ws) == before

    doc = ws.mam_json("stop", "false", "--force")
    assert doc["status"] == "stopped" and doc["message"].startswith("closed zellij pane terminal_")
    assert "false" not in [p["title"] for p in zj.terminals("work")]
    assert "notes" in [p["title"] for p in zj.terminals("work")]


def test_herdr_a_pane_mam_did_not_start_is_reached_by_no_row(ws: Workspace) -> None:
    """herdr names an agent only when `agent start NAME` started it: one the user runs by hand has no name."""
    ws.herdr.start("s1")
    ws.herdr.set_agents("s1", [{"agent": "claude", "agent_status": "idle", "cwd": "/repo", "pane_id": "w1:p1",
                                "terminal_id": "term_1", "workspace_id": "w1", "tab_id": "w1:t1"}])
    _add_row(ws, name="work", backend="herdr", server="s1", status="running", agent="claude")
    for args in (("stop", "--all", "--yes"), ("stop", "work")):  # the first marks the row terminated
        proc = ws.mam(*args)
        assert proc.returncode == 0, proc.stderr
        assert "work was not running on herdr server s1" in proc.stdout
    assert not [c for c in ws.herdr.calls() if c["argv"][2:4] == ["pane", "close"]]
    assert [a["pane_id"] for a in ws.mam_json("ls", "--server", "s1")["agents"]] == ["w1:p1"]


# -- 9. a stop on a full disk ----------------------------------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small filesystem of its own (256 KiB), that a test can fill."""
    yield from mounted_tmpfs(tmp_path, "256k")


def _workspace_on(ws: Workspace, tmux: Tmux, root: Path) -> tuple[dict[str, str], str]:
    """A workspace on `root` with one agent mam started, `a`, on a private tmux server."""
    env = {**ws.env, "MAM_WORKSPACE": str(root)}
    server = tmux.name()
    proc = ws.mam("spawn", "a", "--server", server, "--command", STAND_IN, env=env, cwd=root)
    assert proc.returncode == 0, proc.stderr
    return env, server


def test_a_full_disk_before_the_stop_closes_nothing_and_says_so(ws: Workspace, tmux: Tmux, tmpfs: Path) -> None:
    env, server = _workspace_on(ws, tmux, tmpfs)
    registry = tmpfs / ".mam" / "agent-sessions.yaml"
    before = registry.read_bytes()
    filler = fill(tmpfs)
    proc = ws.mam("stop", "a", env=env, cwd=tmpfs)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith(f"mam: a on tmux server {server} was not stopped: mam could not record the stop "
                                  "in its registry row first ("), proc.stderr
    assert "No space left on device" in proc.stderr and "so it closed nothing" in proc.stderr
    assert _has(tmux, server, "a") and registry.read_bytes() == before
    filler.unlink()


def test_a_full_disk_after_the_close_says_the_agent_is_stopped_and_restore_all_leaves_it(
        ws: Workspace, tmux: Tmux, tmpfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, server = _workspace_on(ws, tmux, tmpfs)
    filled: list[Path] = []
    real_stop = TmuxBackend.stop

    def stop_then_fill(self: TmuxBackend, server: str, name: str, ctx: Any, force: bool = False) -> Any:
        result = real_stop(self, server, name, ctx, force=force)
        filled.append(fill(tmpfs))  # the disk fills while the agent closes: its row cannot be written
        return result

    monkeypatch.setattr(TmuxBackend, "stop", stop_then_fill)
    app = App.open(str(tmpfs), None, env)
    with pytest.raises(MamError) as info:
        stop_document(app, "a", None)
    message = info.value.message
    assert message.startswith(f"a on tmux server {server}: stopped (closed tmux session a); but mam could not "
                              "write that to its registry row ("), message
    assert "No space left on device" in message
    assert message.endswith("the row still says running, with this stop recorded (stop_requested_at), so "
                            "`restore --all` does not start it again"), message
    assert info.value.exit_code == 1 and filled and not _has(tmux, server, "a")
    filled[0].unlink()
    row = yaml.safe_load((tmpfs / ".mam" / "agent-sessions.yaml").read_text())["sessions"][0]
    assert row["status"] == "running" and "stop_requested_at" in row
    plan = ws.mam_json("restore", "--all", "--dry-run", env=env)
    assert [(a["name"], a["outcome"], a["reason"]) for a in plan["agents"]] == [("a", "skipped", "stopped")]
    assert plan["counts"].get("would_restore", 0) == 0
    # Asked by name, the user means it: it starts again, and its row no longer holds the stop.
    doc = ws.mam_json("restore", "a", env=env)
    assert doc["agents"][0]["outcome"] == "restored" and _has(tmux, server, "a")
    assert "stop_requested_at" not in yaml.safe_load((tmpfs / ".mam" / "agent-sessions.yaml").read_text()
                                                     )["sessions"][0]
