"""`mam reconcile` over fake herdr servers: drift A, B, C, unconfirmed rows, and --apply."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import yaml

from conftest import Workspace


def agent(name: str | None, pane: str, kind: str = "claude", **extra: object) -> dict:
    entry = {"agent": kind, "agent_status": "idle", "focused": False, "pane_id": pane, "revision": 0,
             "state_change_seq": 0, "tab_id": "w1:t1", "terminal_id": f"term_{pane[-1]}", "workspace_id": "w1",
             **extra}
    if name is not None:
        entry["name"] = name
    return entry


def test_live_listing_with_the_error_word_confirms_both_rows(ws: Workspace) -> None:
    ws.write_registry("sessions:\n"
                      "  - {name: creator-claude-01, server: live-srv, status: running}\n"
                      "  - {name: server_not_running-codex, server: live-srv, status: running}\n")
    ws.herdr.start("live-srv")
    ws.herdr.set_agents("live-srv", [agent("creator-claude-01", "w1:p1"),
                                     agent("server_not_running-codex", "w1:p2", "codex",
                                           title="server_not_running")])
    doc = ws.mam_json("reconcile")
    assert doc["confirmed"] is True
    assert doc["sessions_alive"] == ["creator-claude-01|live-srv", "server_not_running-codex|live-srv"]
    assert doc["drifts"] == []
    assert doc["applied"] is False
    assert list(doc) == ["schema", "workspace", "registry", "backend", "confirmed", "servers", "sessions_alive",
                         "unconfirmed", "drifts", "applied", "written", "restore"]
    assert doc["written"] == 0


def test_unknown_server_rows_are_unconfirmed_and_get_no_drift(ws: Workspace) -> None:
    ws.write_registry("sessions:\n"
                      "  - {name: a1, server: good, status: running}\n"
                      "  - {name: a2, server: good, status: running}\n"
                      "  - {name: b1, server: broken, status: running}\n"
                      "  - {name: b2, server: broken, status: stopped}\n"
                      "  - {name: c1, server: gone, status: running}\n")
    ws.herdr.start("good")
    ws.herdr.start("broken")
    ws.herdr.set_agents("good", [agent("a1", "w1:p1")])
    ws.herdr.set_fault("broken", stderr="warning: server_not_running cache entry is stale\n", exit=1)
    doc = ws.mam_json("reconcile")
    assert doc["confirmed"] is False
    assert doc["unconfirmed"] == ["b1|broken", "b2|broken"]
    states = {s["server"]: s["state"] for s in doc["servers"]}
    assert states == {"broken": "unknown", "gone": "down", "good": "up"}
    assert [(d["class"], d["name"], d["server"]) for d in doc["drifts"]] == [("A", "c1", "gone"),
                                                                              ("A", "a2", "good")]
    assert all(d["server"] != "broken" for d in doc["drifts"])


def test_drift_b_reports_unregistered_and_unnamed_agents(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: known, server: s1, status: running}\n")
    ws.herdr.start("s1")
    ws.herdr.set_agents("s1", [agent("known", "w1:p1"), agent("stray", "w1:p2", "codex"),
                               agent(None, "w1:p3", "gemini")])
    doc = ws.mam_json("reconcile")
    b = [d for d in doc["drifts"] if d["class"] == "B"]
    assert b == [
        {"class": "B", "name": None, "backend": "herdr", "server": "s1", "host": None, "status": None,
         "live": "alive", "action": "report", "agent": "gemini", "pane_id": "w1:p3"},
        {"class": "B", "name": "stray", "backend": "herdr", "server": "s1", "host": None, "status": None,
         "live": "alive", "action": "report", "agent": "codex", "pane_id": "w1:p2"},
    ]
    assert doc["sessions_alive"] == ["known|s1", "stray|s1"]
    adopt = ws.mam_json("reconcile", "--adopt")
    assert [d["action"] for d in adopt["drifts"] if d["class"] == "B"] == ["report", "adopt"]


def test_apply_fixes_a_and_c_in_one_write_and_the_next_run_is_clean(ws: Workspace) -> None:
    original = ("version: 1\n"
                "sessions:\n"
                "- name: dead-one\n"
                "  server: s1\n"
                "  status: running\n"
                "  team: blue          # a key mam does not know\n"
                "- name: back-again\n"
                "  server: s1\n"
                "  status: stopped\n"
                "  created_at: 2026-12-02T09:00:00Z\n"
                "herdr_sessions:\n"
                "- name: legacy-dead\n"
                "  herdr_session: old-srv\n"
                "  status: starting\n"
                "  pane: {cwd: /tmp/x}\n")
    ws.write_registry(original)
    ws.herdr.start("s1")
    ws.herdr.set_agents("s1", [agent("back-again", "w1:p1")])
    report = ws.mam_json("reconcile")
    assert [(d["class"], d["name"], d["action"]) for d in report["drifts"]] == [
        ("A", "legacy-dead", "mark_terminated"), ("A", "dead-one", "mark_terminated"),
        ("C", "back-again", "mark_running")]
    assert ws.registry.read_text() == original  # a report writes nothing

    applied = ws.mam_json("reconcile", "--apply")
    assert applied["applied"] is True and applied["written"] == 3
    data = yaml.safe_load(ws.registry.read_text())
    rows = {r["name"]: r for r in data["sessions"]}
    assert rows["dead-one"]["status"] == "terminated"
    assert rows["dead-one"]["terminated_reason"] == "absent from herdr server s1"
    assert rows["dead-one"]["terminated_at"].endswith("Z")
    assert rows["dead-one"]["team"] == "blue"
    assert list(rows["dead-one"])[:4] == ["name", "server", "status", "team"]
    assert rows["back-again"]["status"] == "running"
    assert rows["back-again"]["created_at"] == "2026-12-02T09:00:00Z"  # kept as the string it was
    legacy = data["herdr_sessions"][0]
    assert legacy["name"] == "legacy-dead" and legacy["herdr_session"] == "old-srv"
    assert legacy["status"] == "terminated"
    assert legacy["terminated_reason"] == "herdr server old-srv is down"
    assert [r["name"] for r in data["sessions"]] == ["dead-one", "back-again"]
    leftovers = [p.name for p in ws.registry.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []

    again = ws.mam_json("reconcile")
    assert again["drifts"] == []


def test_apply_adopt_appends_named_agents_only(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: known, server: s1, status: running}\n")
    ws.herdr.start("s1")
    ws.herdr.set_agents("s1", [agent("known", "w1:p1"), agent("stray", "w1:p2", "codex", cwd="/repo"),
                               agent(None, "w1:p3")])
    ws.mam_json("reconcile", "--apply", "--adopt")
    data = yaml.safe_load(ws.registry.read_text())
    adopted = data["sessions"][1]
    assert {k: adopted[k] for k in ("name", "backend", "server", "status", "agent", "pane")} == {
        "name": "stray", "backend": "herdr", "server": "s1", "status": "running", "agent": "codex",
        "pane": {"cwd": "/repo", "id": "w1:p2"}}
    assert "adopted_at" in adopted
    assert len(data["sessions"]) == 2
    after = ws.mam_json("reconcile")
    assert [(d["class"], d["name"]) for d in after["drifts"]] == [("B", None)]


def test_apply_with_nothing_to_fix_is_applied_and_writes_nothing(ws: Workspace) -> None:
    ws.herdr.start("s1")
    ws.write_registry("sessions:\n  - {name: a, server: s1, status: stopped}\n")
    before = ws.registry.stat().st_mtime_ns
    doc = ws.mam_json("reconcile", "--apply")
    assert doc["applied"] is True and doc["drifts"] == [] and doc["written"] == 0
    assert ws.registry.stat().st_mtime_ns == before
    text = ws.mam("reconcile", "--apply")
    assert text.returncode == 0 and "no drift" in text.stdout
    assert "fixes applied" not in text.stdout  # nothing was written, so no fix was applied


def test_apply_says_fixes_applied_only_for_rows_it_wrote(ws: Workspace) -> None:
    ws.herdr.start("s1")
    ws.herdr.set_agents("s1", [agent("stray", "w1:p1")])
    ws.write_registry("sessions:\n  - {name: a, server: s1, status: running}\n")
    text = ws.mam("reconcile", "--apply")
    assert text.returncode == 0, text.stderr
    assert f"fixes applied to {ws.registry} (1 row)" in text.stdout
    before = ws.registry.read_bytes()
    again = ws.mam("reconcile", "--apply")  # only the unregistered `stray` is left: a report, nothing to write
    assert "fixes applied" not in again.stdout and "nothing written" in again.stdout, again.stdout
    assert ws.registry.read_bytes() == before


def test_apply_and_dry_run_is_a_usage_error(ws: Workspace) -> None:
    proc = ws.mam("reconcile", "--apply", "--dry-run", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "usage"


def test_accepted_default_flags(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: a, server: s1, status: running}\n")
    before = ws.registry.read_bytes()
    doc = ws.mam_json("reconcile", "--once", "--dry-run", "--emit-diff")
    assert doc["drifts"][0]["class"] == "A"
    assert ws.registry.read_bytes() == before


def test_watch_prints_one_document_per_pass(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: a, server: s1, status: running}\n")
    proc = subprocess.Popen([sys.executable, "-m", "mam", "reconcile", "--json", "--watch", "0.2"], env=ws.env,
                            cwd=ws.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while len(lines) < 2 and time.monotonic() < deadline:
        lines.append(proc.stdout.readline())
    proc.send_signal(2)
    proc.wait(timeout=10)
    docs = [json.loads(line) for line in lines]
    assert len(docs) == 2 and all(d["drifts"][0]["name"] == "a" for d in docs)
    assert proc.returncode == 0
    assert ws.herdr.server_starts() == []
