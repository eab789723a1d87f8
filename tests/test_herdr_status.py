"""`mam status` and `mam ls` against a fake herdr that behaves as herdr 0.8 does."""

from __future__ import annotations

import json
import time

import pytest

from conftest import Workspace

REGISTRY = """\
version: 1
sessions:
  - name: creator-claude-01
    backend: herdr
    server: live-srv
    status: running
    agent: claude
herdr_sessions:
  - name: ghost-creator-claude
    status: running
    herdr_session: ghost-srv
    pane: {cwd: /tmp/x}
"""

AGENTS = [
    {"agent": "claude", "agent_status": "idle", "cwd": "/repo", "focused": True, "name": "creator-claude-01",
     "pane_id": "w1:p2", "revision": 3, "state_change_seq": 1, "tab_id": "w1:t1", "terminal_id": "term_1a",
     "workspace_id": "w1"},
    {"agent": "codex", "agent_status": "working", "focused": False, "pane_id": "w1:p3", "revision": 1,
     "state_change_seq": 2, "tab_id": "w1:t1", "terminal_id": "term_2b", "workspace_id": "w1"},
]


def by_server(doc: dict, server: str) -> dict:
    return next(s for s in doc["servers"] if s["server"] == server)


def test_status_reports_stopped_session_down_and_never_starts_it(ws: Workspace) -> None:
    ws.write_registry(REGISTRY)
    ws.herdr.start("live-srv")
    ws.herdr.set_agents("live-srv", AGENTS)
    doc = ws.mam_json("status")
    ghost = by_server(doc, "ghost-srv")
    assert ghost == {"backend": "herdr", "server": "ghost-srv", "host": None, "state": "down", "agents": 0,
                     "error": ghost["error"]}
    assert ghost["error"]["kind"] == "server_down"
    assert by_server(doc, "live-srv")["state"] == "up"
    assert by_server(doc, "live-srv")["agents"] == 2
    rows = {s["name"]: s for s in doc["sessions"]}
    assert rows["ghost-creator-claude"]["live"] == "absent"
    assert rows["ghost-creator-claude"]["cwd"] == "/tmp/x"
    assert rows["creator-claude-01"] == {"name": "creator-claude-01", "backend": "herdr", "server": "live-srv",
                                         "host": None, "status": "running", "live": "alive", "agent": "claude",
                                         "cwd": "/repo", "pane_id": "w1:p2", "restore_count": 0,
                                         "restored_at": None, "crash_loop": False, "exit_status": None,
                                         "exit_signal": None, "last_output": [], "end": None,
                                         "ended_at": None, "state": "idle",
                                         "state_source": "backend",
                                         "evidence": {"field": "agent_status", "value": "idle"},
                                         "state_age": None}
    queried = [c["argv"] for c in ws.herdr.calls() if "agent" in c["argv"]]
    assert ["--session", "ghost-srv", "agent", "list"] in queried
    assert ["--session", "live-srv", "agent", "list"] in queried
    assert len(ws.herdr.server_starts()) == 1  # only the one the test itself started
    assert not ws.herdr.running("ghost-srv")


def test_status_document_shape_and_order(ws: Workspace) -> None:
    ws.write_registry(REGISTRY)
    doc = ws.mam_json("status")
    assert list(doc) == ["schema", "workspace", "registry", "backend", "servers", "sessions", "state_filter"]
    assert doc["schema"] == 1 and doc["backend"] is None
    assert doc["workspace"] == str(ws.root)
    assert doc["registry"] == str(ws.registry)
    assert [s["server"] for s in doc["servers"]] == ["ghost-srv", "live-srv"]
    assert [(s["server"], s["name"]) for s in doc["sessions"]] == [("ghost-srv", "ghost-creator-claude"),
                                                                  ("live-srv", "creator-claude-01")]
    assert not ws.registry.with_name("agent-sessions.yaml.lock").exists()  # a query takes no write lock
    assert ws.registry.read_text() == REGISTRY


@pytest.mark.parametrize("stderr", [
    '{"error":{"code":"server_not_running"}}\n',
    '{"id":"cli:agent:list","error":{"code":"server_not_running","message":"no herdr server is running at '
    '/x/herdr.sock; run `herdr session attach s` to start or attach it"}}\n',
])
def test_structured_server_not_running_is_down(ws: Workspace, stderr: str) -> None:
    ws.write_registry("sessions:\n  - {name: a, server: s1, status: running}\n")
    ws.herdr.start("s1")
    ws.herdr.set_fault("s1", stderr=stderr, exit=1)
    doc = ws.mam_json("status")
    assert doc["servers"][0]["state"] == "down"
    assert doc["servers"][0]["agents"] == 0
    assert doc["sessions"][0]["live"] == "absent"


def test_error_words_inside_agent_data_are_data(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: server_not_running-codex, server: s1, status: running}\n")
    ws.herdr.start("s1")
    agents = [
        {"agent": "codex", "agent_status": "idle", "focused": False, "name": "server_not_running-codex",
         "pane_id": "w1:p1", "revision": 0, "state_change_seq": 0, "tab_id": "w1:t1", "terminal_id": "term_a",
         "workspace_id": "w1"},
        {"agent": "claude", "agent_status": "working", "focused": True, "name": "other",
         "pane_id": "w1:p2", "revision": 0, "state_change_seq": 0, "tab_id": "w1:t1", "terminal_id": "term_b",
         "title": "server_not_running", "workspace_id": "w1"},
    ]
    ws.herdr.set_agents("s1", agents)
    doc = ws.mam_json("status")
    assert doc["servers"][0]["state"] == "up"
    assert doc["sessions"][0]["live"] == "alive"
    listing = ws.mam_json("ls", "--server", "s1")
    assert [a["name"] for a in listing["agents"]] == ["server_not_running-codex", "other"]
    assert [a["state"] for a in listing["agents"]] == ["idle", "working"]


FAILURES = {
    "other code mentioning the word": dict(
        stderr='{"error":{"code":"internal_error","message":"server_not_running while reading"},'
               '"id":"cli:agent:list"}\n', exit=1),
    "plain text warning": dict(stderr="warning: server_not_running cache entry is stale\n", exit=1),
    "empty stderr, non-zero exit": dict(stderr="", exit=1),
    "garbage on stdout": dict(stdout="\x00not json{{{\n", exit=0),
    "raw rust error before 0.8": dict(stderr='Error: Os { code: 2, kind: NotFound, message: "No such file" }\n',
                                      exit=1),
    "down envelope with exit 2": dict(stderr='{"error":{"code":"server_not_running"}}\n', exit=2),
    "down envelope after a warning line": dict(
        stderr='warning: x\n{"error":{"code":"server_not_running"}}\n', exit=1),
}


@pytest.mark.parametrize("fault", FAILURES.values(), ids=list(FAILURES))
def test_failures_that_are_not_the_signal_are_unknown(ws: Workspace, fault: dict) -> None:
    ws.write_registry("sessions:\n  - {name: a, server: s1, status: running}\n")
    ws.herdr.start("s1")
    ws.herdr.set_fault("s1", **fault)
    doc = ws.mam_json("status")
    server = doc["servers"][0]
    assert server["state"] == "unknown"
    assert server["agents"] is None
    assert server["error"]["kind"] in {"unknown", "bad_output"}
    assert doc["sessions"][0]["live"] == "unknown"
    proc = ws.mam("ls", "--server", "s1", "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["agents"] == []
    assert json.loads(proc.stdout)["server"]["state"] == "unknown"
    assert len(ws.herdr.server_starts()) == 1  # the test's own: no query ever starts one


def test_garbage_is_bad_output(ws: Workspace) -> None:
    ws.herdr.start("s1")
    ws.herdr.set_fault("s1", **FAILURES["garbage on stdout"])
    doc = ws.mam_json("status", "--server", "s1")
    assert doc["servers"][0]["error"]["kind"] == "bad_output"


def test_hanging_herdr_times_out_unknown_without_delaying_others(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: a, server: slow, status: running}\n"
                      "  - {name: b, server: fine, status: running}\n")
    ws.herdr.start("slow")
    ws.herdr.start("fine")
    ws.herdr.set_fault("slow", sleep=60, exit=0)
    ws.herdr.set_agents("fine", [{"agent": "claude", "agent_status": "idle", "focused": False, "name": "b",
                                  "pane_id": "w1:p1", "revision": 0, "state_change_seq": 0, "tab_id": "w1:t1",
                                  "terminal_id": "term_c", "workspace_id": "w1"}])
    env = {**ws.env, "MAM_TIMEOUT": "1"}
    started = time.monotonic()
    doc = ws.mam_json("status", env=env)
    elapsed = time.monotonic() - started
    slow, fine = by_server(doc, "slow"), by_server(doc, "fine")
    assert slow["state"] == "unknown" and slow["error"]["kind"] == "timeout"
    assert fine["state"] == "up" and fine["agents"] == 1
    assert elapsed < 30  # bounded by the timeout, not by the 60 s hang


def test_missing_herdr_binary_is_unknown_not_installed(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: a, server: s1, status: running}\n")
    env = {**ws.env, "PATH": "/nonexistent"}
    doc = ws.mam_json("status", env=env, expect=3)  # the whole document, and exit 3: herdr is missing
    assert doc["servers"][0]["state"] == "unknown"
    assert doc["servers"][0]["error"]["kind"] == "not_installed"
    proc = ws.mam("ls", "--server", "s1", env=env)
    assert proc.returncode == 3
    assert proc.stderr.startswith("mam: herdr: not found on PATH")


def test_ls_down_server_exits_zero(ws: Workspace) -> None:
    doc = ws.mam_json("ls", "--server", "nowhere")
    assert doc == {"schema": 1, "server": {"backend": "herdr", "server": "nowhere", "host": None, "state": "down",
                                           "agents": 0, "error": doc["server"]["error"]}, "agents": []}
    assert ws.herdr.server_starts() == []


def test_status_ignores_ambient_herdr_variables(ws: Workspace) -> None:
    ws.herdr.start("right")
    env = {**ws.env, "HERDR_SESSION": "wrong", "HERDR_SOCKET_PATH": "/tmp/nowhere.sock"}
    doc = ws.mam_json("status", "--server", "right", env=env)
    assert doc["servers"][0]["state"] == "up"
    listing_calls = [c for c in ws.herdr.calls() if c["argv"][-2:] == ["agent", "list"]]
    assert listing_calls[-1]["argv"][:2] == ["--session", "right"]


def test_table_output_for_people(ws: Workspace) -> None:
    ws.write_registry(REGISTRY)
    proc = ws.mam("status")
    assert proc.returncode == 0, proc.stderr
    assert "ghost-creator-claude" in proc.stdout and "absent" in proc.stdout
    assert "\x1b[" not in proc.stdout
    assert not proc.stdout.lstrip().startswith("{")


def test_an_explicit_backend_without_its_binary_is_said_even_with_no_rows(ws: Workspace) -> None:
    proc = ws.mam("--backend", "herdr", "status", env={**ws.env, "PATH": "/nonexistent"})
    assert proc.returncode == 3
    assert proc.stderr.splitlines() == ["mam: herdr: not found on PATH: install herdr, or pick another backend: "
                                        "`mam --backend tmux ...`, or `backend: tmux` in .mam/config.yaml"]
    assert "no agents registered" in proc.stdout


def test_a_server_the_rows_name_is_theirs_without_backend(ws: Workspace) -> None:
    """`status --server team` with no --backend: a row of another backend on `team` is asked there, and the
    default backend (herdr) is not asked for a `team` of its own; a server no row names is asked of herdr."""
    ws.write_registry("sessions:\n  - {name: a, backend: zellij, server: team, status: running}\n")
    doc = ws.mam_json("status", "--server", "team", "--no-state")  # the fake zellij answers
    assert [(s["backend"], s["server"]) for s in doc["servers"]] == [("zellij", "team")]
    assert not any(c["argv"][:2] == ["--session", "team"] for c in ws.herdr.calls())
    doc = ws.mam_json("status", "--server", "nobody", "--no-state")
    assert [(s["backend"], s["server"], s["state"]) for s in doc["servers"]] == [("herdr", "nobody", "down")]
    proc = ws.mam("status", "--server", "nobody", "--no-state")
    assert f"no agents registered on server nobody in {ws.registry}" in proc.stdout
