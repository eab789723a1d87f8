"""The audit trail (issue 35, point 5): every action that changes something, from any face, appends one JSON
line to .mam/audit.jsonl, whole under concurrency, with typed text masked; `mam audit` reads it back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_schemas import validator

from conftest import Tmux, Workspace
from mam.audit import trail


def lines(ws: Workspace) -> list[dict[str, Any]]:
    path = ws.root / ".mam" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_each_acting_command_writes_one_line_and_queries_none(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    assert ws.mam("spawn", "a1", "--server", server, "--command", "cat").returncode == 0
    assert ws.mam("send", "a1", "my secret password", "--enter").returncode == 0
    assert ws.mam("status").returncode == 0 and ws.mam("peek", "a1").returncode in (0, 1)  # queries: nothing
    assert ws.mam("spawn", "a1", "--server", server, "--command", "cat").returncode == 2  # a refusal is recorded
    assert ws.mam("stop", "a1").returncode == 0
    assert ws.mam("forget", "a1", "--dry-run").returncode == 0  # changes nothing: no line
    got = lines(ws)
    assert [(e["action"], e["agent"], e["result"], e["exit"]) for e in got] == [
        ("spawn", "a1", "ok", 0), ("send", "a1", "ok", 0), ("spawn", "a1", "refused", 2), ("stop", "a1", "ok", 0)]
    assert {e["face"] for e in got} == {"cli"} and all(e["user"] for e in got)
    text = json.dumps(got)
    assert "secret" not in text and got[1]["arguments"]["text"] == {
        "chars": 18, "sha256": trail.hashlib.sha256(b"my secret password").hexdigest()[:12]}
    doc = ws.mam_json("audit", "--agent", "a1")
    # strict but for `arguments`, each command's own: a line without a field, or with one more, is refused
    check = validator("audit.json")
    assert check.is_valid(doc), list(check.iter_errors(doc))
    for key in doc["entries"][0]:
        assert not check.is_valid({**doc, "entries": [{k: v for k, v in doc["entries"][0].items() if k != key}]})
    assert not check.is_valid({**doc, "entries": [{**doc["entries"][0], "extra": 1}]})
    assert [e["action"] for e in doc["entries"]] == ["spawn", "send", "spawn", "stop"] and doc["skipped"] == 0
    assert [e["action"] for e in ws.mam_json("audit", "--limit", "1")["entries"]] == ["stop"]
    table = ws.mam("audit").stdout.splitlines()
    assert table[0].split()[:6] == ["TIME", "USER", "FACE", "ACTION", "AGENT", "RESULT"]
    assert "refused (2)" in table[3] and len(table) == 5
    skill = {**ws.env, "MAM_FACE": "skill"}
    assert ws.mam("forget", "a1", env=skill).returncode == 0
    assert lines(ws)[-1]["face"] == "skill" and lines(ws)[-1]["action"] == "forget"


def test_since_takes_an_age_or_a_utc_date(ws: Workspace) -> None:
    from mam.commands.audit import since_of

    assert since_of("2h", now=10_000.0) == 10_000.0 - 7200
    assert since_of("2026-12-06T13:00Z") == since_of("2026-12-06T13:00:00")
    proc = ws.mam("audit", "--since", "yesterday")
    assert proc.returncode == 2 and "neither an age nor a UTC date" in proc.stderr
    assert ws.mam_json("audit")["entries"] == []


WRITER = """
import sys
from pathlib import Path
from mam.audit import trail
for i in range(200):
    trail.record(Path(sys.argv[1]), "send", f"w{sys.argv[2]}", {"text": "x" * 50, "n": i, "pad": "p" * 150}, "ok")
"""


def test_twenty_writers_at_once_write_every_line_whole(tmp_path: Path) -> None:
    dot = tmp_path / ".mam"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(dot), str(n)]) for n in range(20)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    raw = (dot / "audit.jsonl").read_text().splitlines()
    assert len(raw) == 20 * 200
    parsed = [json.loads(line) for line in raw]  # each whole: one JSON object a line
    for n in range(20):
        assert sorted(e["arguments"]["n"] for e in parsed if e["agent"] == f"w{n}") == list(range(200))


def test_the_file_rotates_at_its_size_and_a_huge_line_is_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setattr(trail, "ROTATE_AT", 2000)
    dot = tmp_path / ".mam"
    for i in range(40):
        trail.record(dot, "stop", f"agent-{i}", {"command": "c" * 10_000}, "ok")
    current, first = dot / "audit.jsonl", dot / "audit.jsonl.1"
    assert first.exists() and current.stat().st_size < 2000 + trail.LINE_LIMIT
    assert not (dot / f"audit.jsonl.{trail.KEEP + 1}").exists()
    every = [json.loads(line) for p in sorted(dot.glob("audit.jsonl*")) for line in p.read_text().splitlines()]
    assert all(len(json.dumps(e)) < trail.LINE_LIMIT for e in every)
    huge = trail.line_of(trail.Actor("cli", "me"), "send", "x" * 9000, {"a": ["y" * 300] * 50}, "ok", 0, "m" * 9000)
    assert len(huge) <= trail.LINE_LIMIT and json.loads(huge)["arguments"] == {"cut": True}


def test_an_unwritable_or_linked_trail_fails_nothing_and_is_said(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """A clone's .mam/audit.jsonl as a link to a file of the user's is not followed; the action goes on."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (ws.root / ".mam").mkdir(exist_ok=True)
    (ws.root / ".mam" / "audit.jsonl").symlink_to(victim)
    server = tmux.name()
    proc = ws.mam("spawn", "l1", "--server", server, "--command", "cat")
    assert proc.returncode == 0, proc.stderr
    assert "warning: the audit line for spawn was not written" in proc.stderr and "symbolic link" in proc.stderr
    assert victim.read_text() == "mine\n"
    if os.geteuid() != 0:  # root writes anywhere
        (ws.root / ".mam" / "audit.jsonl").unlink()
        (ws.root / ".mam").chmod(0o500)
        try:
            proc = ws.mam("stop", "l1")
            assert proc.returncode == 0 and "warning: the audit line for stop" in proc.stderr
        finally:
            (ws.root / ".mam").chmod(0o700)


def test_top_actions_are_recorded_as_tops(ws: Workspace, tmux: Tmux) -> None:
    from mam.live.actions import Actions
    from mam.servers.app import App

    server = tmux.name()
    actions = Actions(App.open(str(ws.root), None, ws.env), [server])
    said = actions.spawn(f"t1 --command cat --server {server}")
    assert "t1 is running" in said
    assert [(e["face"], e["action"], e["agent"]) for e in lines(ws)] == [("top", "spawn", "t1")]
