"""`mam restore` on herdr and zellij (their fakes), a server that cannot be asked, and the row fields restore
relies on as the registry reads and writes them."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from test_zellij import Zellij, zellij  # noqa: F401 - the zellij fixture

from conftest import FAKES, Workspace
from mam.registry import file as registry_file
from mam.registry import text as registry_text


def spawn(ws: Workspace, *args: str) -> None:
    proc = ws.mam("spawn", "--json", *args)  # --json before the agent's own `-- ARGS`
    assert proc.returncode == 0, proc.stderr


def test_herdr_agents_come_back_resumed_after_their_server_stopped(ws: Workspace) -> None:
    spawn(ws, "coder-1", "--agent", "claude", "--server", "team", "--cwd", str(ws.root), "--", "--session-id",
          "abc-123", "--model", "opus")
    spawn(ws, "coder-2", "--agent", "codex", "--server", "team", "--cwd", str(ws.root))
    rows = {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}
    assert rows["coder-1"]["agent_session"] == "abc-123"
    ws.herdr.stop("team")
    ws.herdr.set_agents("team", [])  # a reboot: nothing of the old server's agents is left
    plan = ws.mam_json("restore", "--all", "--dry-run")
    assert [a["argv"] for a in plan["agents"]] == [["claude", "--model", "opus", "--resume", "abc-123"], ["codex"]]
    assert len(ws.herdr.server_starts()) == 1  # the dry run started nothing
    doc = ws.mam_json("restore", "--all")
    assert doc["counts"]["restored"] == 2
    assert len(ws.herdr.server_starts()) == 2 and ws.herdr.running("team")
    starts = [c["argv"] for c in ws.herdr.calls() if c["argv"][2:4] == ["agent", "start"]]
    assert starts[-2][4:7] == ["coder-1", "--kind", "claude"]
    assert starts[-2][-5:] == ["--", "--model", "opus", "--resume", "abc-123"]
    assert starts[-1][2:6] == ["agent", "start", "coder-2", "--kind"] and starts[-1][-1] == "--"
    status = {s["name"]: (s["status"], s["live"]) for s in ws.mam_json("status")["sessions"]}
    assert status == {"coder-1": ("running", "alive"), "coder-2": ("running", "alive")}


def test_a_name_on_two_servers_is_restored_by_its_server(ws: Workspace) -> None:
    """`restore NAME` for a name registered on two servers says to pass --server, and --server takes it."""
    ws.write_registry("sessions:\n" + "".join(
        f"  - {{name: coder, server: {server}, status: terminated, spec: {{kind: {kind}, args: [], cwd: {ws.root}}}}}\n"
        for server, kind in (("east", "claude"), ("west", "codex"))))
    proc = ws.mam("restore", "coder", "--dry-run")
    assert proc.returncode == 2 and "registered on several servers" in proc.stderr
    assert "hint: pass --server NAME" in proc.stderr
    plan = ws.mam_json("restore", "coder", "--server", "west", "--dry-run")
    assert [(a["server"], a["argv"]) for a in plan["agents"]] == [("west", ["codex"])]
    plan = ws.mam_json("restore", "--all", "--server", "east", "--dry-run")
    assert [a["server"] for a in plan["agents"]] == ["east"]
    text = ws.mam("restore", "coder", "--server", "west", "--dry-run")
    assert text.returncode == 0 and text.stdout.splitlines()[1:] == ["  argv: codex", f"  cwd: {ws.root}"], text.stdout
    ws.write_registry("sessions:\n" + "".join(
        f"  - {{name: coder, server: east,{host} status: terminated,"
        f" spec: {{kind: claude, args: [], cwd: {ws.root}}}}}\n"
        for host in ("", " host: box,")))
    proc = ws.mam("restore", "coder", "--server", "east", "--dry-run")
    assert proc.returncode == 2 and proc.stderr.splitlines()[1] == "hint: pass --host HOST", proc.stderr
    plan = ws.mam_json("restore", "coder", "--host", "local", "--dry-run")
    assert [(a["server"], a["host"]) for a in plan["agents"]] == [("east", None)]
    proc = ws.mam("restore", "coder", "--server", "north", "--dry-run")
    assert proc.returncode == 1 and "coder is not registered on server north" in proc.stderr
    assert ws.mam("restore", "coder", "--server", "-L", "--dry-run").returncode == 2
    assert ws.herdr.server_starts() == []


def test_a_row_whose_server_is_unknown_is_never_restored(ws: Workspace) -> None:
    ws.write_registry("sessions:\n"
                      f"  - {{name: far, server: flaky, status: terminated, spec: {{kind: claude, args: [],"
                      f" cwd: {ws.root}}}}}\n")
    ws.herdr.set_fault("flaky", stderr="Error: Os { code: 2, kind: NotFound }\n", exit=1)
    text = ws.registry.read_text()
    for args, code in ((("--all",), 0), (("far",), 1)):  # a named agent not restored fails the command
        doc = ws.mam_json("restore", *args, expect=code)
        assert [(a["outcome"], a["server_state"]) for a in doc["agents"]] == [("skipped", "unknown")]
        assert "it may still run there" in doc["agents"][0]["message"]
    assert ws.registry.read_text() == text and ws.herdr.server_starts() == []


def test_zellij_panes_come_back_with_their_command_args_and_cwd(ws: Workspace, zellij: Zellij,  # noqa: F811
                                                              tmp_path: Path) -> None:
    work = tmp_path / "work-dir"
    work.mkdir()
    spawn(ws, "helper", "--command", "sh -c 'exec sleep 600' x", "--server", "work", "--cwd", str(work), "--",
          "two words")
    for command in (["kill-session", "work"], ["delete-session", "--force", "work"]):
        subprocess.run([str(FAKES / "zellij"), *command], env=ws.env, check=True, timeout=20, capture_output=True)
    assert ws.mam_json("status")["sessions"][0]["live"] == "absent"
    doc = ws.mam_json("restore", "helper")
    assert doc["agents"][0]["outcome"] == "restored" and doc["agents"][0]["bootstrap"] is True
    runs = [c["argv"] for c in zellij.calls() if c["argv"][2:3] == ["run"]]
    assert runs[-1] == runs[0] == ["--session", "work", "run", "--name", "helper", "--cwd", str(work), "--",
                                   "sh", "-c", "exec sleep 600", "x", "two words"]
    assert len(runs) == 2
    assert ws.mam_json("status")["sessions"][0]["live"] == "alive"


def test_spec_and_agent_session_round_trip_through_both_forms() -> None:
    hand = ("version: 1\nsessions:\n  - name: a\n    server: s\n    spec:\n      kind: claude\n"
            "      args: [--model, opus]\n      cwd: /repo\n      env_names: [API_KEY]\n      host: box\n"
            "    agent_session: abc\n")
    document, rows = registry_file.parse(hand, Path("x.yaml"), "herdr")
    assert rows[0].spec == {"kind": "claude", "args": ["--model", "opus"], "cwd": "/repo", "env_names": ["API_KEY"],
                            "host": "box"}
    assert rows[0].agent_session == "abc"
    written = registry_text.dump(document)
    assert registry_text.fast_load(written) == document == yaml.safe_load(written)


@pytest.mark.parametrize(("spec", "message"), [
    ("spec: x", "spec must be a mapping"),
    ("spec: {args: x}", "spec.args must be a list of strings"),
    ("spec: {kind: claude, command: sh}", "spec holds both kind and command"),
    ("spec: {env_names: [A-B]}", "spec.env_names: 'A-B' is not a variable name"),
    ("spec: {cwd: 7}", "spec.cwd must be a string"),
    ("agent_session: 7", "agent_session must be a string"),
])
def test_a_bad_spec_is_refused_with_its_line(ws: Workspace, spec: str, message: str) -> None:
    ws.write_registry(f"sessions:\n  - name: a\n    server: s\n    {spec}\n")
    proc = ws.mam("status", "--json")
    assert proc.returncode == 2
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "invalid_registry" and message in error["message"] and ":4:" in error["message"]


@pytest.mark.parametrize(("name", "env", "message"), [
    ("NOT_SET_HERE", {}, "--env NOT_SET_HERE: not set in this environment"),
    ("A-B", {}, "--env A-B: not a variable name"),
    ("CLAUDECODE", {"CLAUDECODE": "1"}, "--env CLAUDECODE: the server scrub removes it"),
])
def test_spawn_env_refuses_what_it_cannot_pass_before_anything_starts(ws: Workspace, name: str,
                                                                      env: dict[str, str], message: str) -> None:
    proc = ws.mam("spawn", "coder-1", "--agent", "claude", "--server", "team", "--env", name,
                  env={**ws.env, **env})
    assert proc.returncode == 2 and proc.stderr.startswith(f"mam: {message}"), proc.stderr
    assert not ws.registry.exists() and ws.herdr.server_starts() == []


def test_restore_needs_names_or_all_and_reconcile_restore_needs_apply(ws: Workspace) -> None:
    for args in (("restore",), ("restore", "a", "--all"), ("reconcile", "--restore")):
        proc = ws.mam(*args)
        assert proc.returncode == 2, (args, proc.stderr)
    assert not ws.registry.exists()


def test_restore_with_no_autostart_fails_and_keeps_the_row(ws: Workspace) -> None:
    ws.write_registry("sessions:\n"
                      "  - {name: coder-1, server: team, status: terminated, agent_session: s-1,"
                      f" spec: {{kind: claude, args: [--model, opus], cwd: {ws.root}}}}}\n")
    text = ws.registry.read_text()
    # a hand-written spec: run only with consent (docs/trust.md)
    proc = ws.mam("restore", "--all", "--trust-spec", "--json", env={**ws.env, "MAM_NO_AUTOSTART": "1"})
    assert proc.returncode == 1, proc.stderr
    entry = json.loads(proc.stdout)["agents"][0]
    assert entry["outcome"] == "failed" and "MAM_NO_AUTOSTART=1" in entry["message"]
    assert entry["argv"] == ["claude", "--model", "opus", "--resume", "s-1"]
    assert ws.registry.read_text() == text and ws.herdr.server_starts() == []


def test_a_new_spawn_of_the_name_replaces_the_old_session_with_its_own(ws: Workspace) -> None:
    spawn(ws, "coder-1", "--agent", "claude", "--server", "team", "--", "--session-id", "old-1")
    ws.mam_json("stop", "coder-1")
    spawn(ws, "coder-1", "--agent", "claude", "--server", "team")
    row = yaml.safe_load(ws.registry.read_text())["sessions"][0]
    # mam chose the new conversation's id (claude's new_session), passed it, and keeps it for restore
    assert row["agent_session"] != "old-1" and uuid.UUID(row["agent_session"])
    assert row["spec"]["args"] == []
    argvs = [call["argv"] for call in ws.herdr.calls()]
    assert any(argv[-3:] == ["--", "--session-id", row["agent_session"]] for argv in argvs), argvs


def test_a_kind_without_new_session_gets_no_session_id(ws: Workspace) -> None:
    spawn(ws, "coder-2", "--agent", "codex", "--server", "team")
    row = yaml.safe_load(ws.registry.read_text())["sessions"][0]
    assert "agent_session" not in row


def test_a_session_herdr_reports_is_recorded_by_reconcile_and_resumed_by_restore(ws: Workspace) -> None:
    """codex takes no session id from mam: herdr learns it from the agent (`agent_session`, kind id), reconcile
    reports it as drift D and --apply records it, and restore resumes that conversation. A session that is a
    path, or an id the agent would read as an option, is never taken."""
    spawn(ws, "coder-2", "--agent", "codex", "--server", "team", "--cwd", str(ws.root), "--", "--full-auto")
    spawn(ws, "coder-3", "--agent", "codex", "--server", "team", "--cwd", str(ws.root))
    spawn(ws, "coder-4", "--agent", "claude", "--server", "team", "--cwd", str(ws.root))
    listed = json.loads((ws.herdr.session_dir("team") / "agents.json").read_text())
    reported = {"coder-2": {"agent": "codex", "kind": "id", "source": "herdr:codex", "value": "019a-77c1"},
                "coder-3": {"agent": "codex", "kind": "id", "source": "herdr:codex", "value": "--yolo"},
                # the claude pane reports a codex session (another agent runs there now): not claude's to resume
                "coder-4": {"agent": "codex", "kind": "id", "source": "herdr:codex", "value": "019a-0000"}}
    for entry in listed:
        entry["agent_session"] = reported[entry["name"]]
    ws.herdr.set_agents("team", listed)
    doc = ws.mam_json("reconcile")
    assert [(d["class"], d["name"], d["action"], d.get("agent_session")) for d in doc["drifts"]] == [
        ("D", "coder-2", "record_session", "019a-77c1")]
    before = ws.registry.read_text()
    assert "019a-77c1" not in before  # a report only
    text = ws.mam("reconcile").stdout
    assert "record_session" in text and "D: alive" in text
    applied = ws.mam_json("reconcile", "--apply")
    assert applied["written"] == 1
    rows = {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}
    assert rows["coder-2"]["agent_session"] == "019a-77c1" and "agent_session" not in rows["coder-3"]
    assert rows["coder-4"]["agent_session"] != "019a-0000"  # mam's own --session-id UUID stays
    assert ws.mam_json("reconcile")["drifts"] == []  # recorded: no drift left
    listed[0]["agent_session"] = {"agent": "codex", "kind": "path", "source": "x", "value": "/tmp/s.jsonl"}
    ws.herdr.set_agents("team", listed)
    assert ws.mam_json("reconcile")["drifts"] == []  # a path is not an id: the recorded one stays
    ws.herdr.stop("team")
    ws.herdr.set_agents("team", [])
    plan = {a["name"]: a["argv"] for a in ws.mam_json("restore", "--all", "--dry-run")["agents"]}
    assert plan["coder-2"] == ["codex", "resume", "019a-77c1", "--full-auto"] and plan["coder-3"] == ["codex"]
    assert plan["coder-4"] == ["claude", "--resume", rows["coder-4"]["agent_session"]]


def test_a_row_without_agent_takes_a_session_only_of_its_spec_kind(ws: Workspace) -> None:
    """A hand-written row with no `agent:` is still about its spec's kind: a codex session reported by the pane
    is not recorded for a claude row (restore would hand a codex id to claude); one of claude is."""
    ws.write_registry("sessions:\n  - {name: hand, server: team, status: running,"
                      f" spec: {{kind: claude, args: [], cwd: {ws.root}}}}}\n")
    ws.herdr.start("team")
    entry = {"name": "hand", "agent": "codex", "agent_status": "idle", "cwd": str(ws.root), "pane_id": "w1:p1",
             "agent_session": {"agent": "codex", "kind": "id", "source": "herdr:codex", "value": "019a-1111"}}
    ws.herdr.set_agents("team", [entry])
    assert ws.mam_json("reconcile")["drifts"] == []
    entry.update(agent="claude", agent_session={"agent": "claude", "kind": "id", "source": "herdr:claude",
                                                 "value": "5e0c-2222"})
    ws.herdr.set_agents("team", [entry])
    assert [(d["class"], d["agent_session"]) for d in ws.mam_json("reconcile")["drifts"]] == [("D", "5e0c-2222")]


@pytest.mark.parametrize("value", ["--yolo", "../../tmp/evil", "/tmp/s", "a b", "x\x1b[2J", "", "a" * 200])
def test_a_reported_session_that_is_no_plain_id_is_never_taken(value: str) -> None:
    from mam_herdr.backend import parse_agent_list

    def listing(session: object) -> str:
        entry = {"agent": "codex", "agent_session": session, "agent_status": "idle", "name": "a", "pane_id": "w1:p1"}
        return json.dumps({"id": "cli:agent:list", "result": {"agents": [entry], "type": "agent_list"}})

    plain = {"agent": "codex", "kind": "id", "source": "herdr:codex", "value": "019a-77c1"}
    assert parse_agent_list(listing(plain))[0].session == "019a-77c1"
    assert parse_agent_list(listing({**plain, "value": value}))[0].session is None
    assert parse_agent_list(listing({**plain, "kind": "path"}))[0].session is None


def test_a_row_both_c_and_d_is_fixed_whole_and_counted_once(ws: Workspace) -> None:
    """A row registered terminated whose agent is alive (C) and reports a session the row lacks (D): one
    --apply marks it running and records the session, and says one row was written, not two."""
    registry = ("sessions:\n  - {name: back, server: team, status: terminated, agent: claude,"
                f" spec: {{kind: claude, args: [], cwd: {ws.root}}}}}\n")
    session = {"agent": "claude", "kind": "id", "source": "herdr:claude", "value": "5e0c-3333"}
    ws.write_registry(registry)
    ws.herdr.start("team")
    ws.herdr.set_agents("team", [{"name": "back", "agent": "claude", "agent_status": "idle", "cwd": str(ws.root),
                                  "pane_id": "w1:p1", "agent_session": session}])
    assert sorted(d["class"] for d in ws.mam_json("reconcile")["drifts"]) == ["C", "D"]
    assert ws.mam_json("reconcile", "--apply")["written"] == 1
    row = yaml.safe_load(ws.registry.read_text())["sessions"][0]
    assert (row["status"], row["agent_session"]) == ("running", "5e0c-3333")
    ws.write_registry(registry)
    assert "(1 row)" in ws.mam("reconcile", "--apply").stdout
