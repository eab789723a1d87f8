"""The audit trail (`.mam/audit.jsonl`, mam.audit): one line per acting command and agent from every face, masked
arguments, whole lines under 20 concurrent writers, rotation at its size, links refused, a line that cannot be
written failing nothing; `mam audit` reading it back. The CLI path on real tmux (private sockets, pinned HOME)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import Tmux, Workspace

ROOT = Path(__file__).resolve().parent.parent
AGENTS = Path(__file__).parent / "agents"
RECORDER = str(AGENTS / "recorder.py")
STAND_IN = "sh -c 'exec sleep 600'"
tmux_only = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def trail(ws: Workspace) -> list[dict[str, Any]]:
    path = ws.root / ".mam" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class Lines:
    """The trail's lines since the last look."""

    def __init__(self, ws: Workspace) -> None:
        self.ws, self.seen = ws, len(trail(ws))

    def new(self) -> list[dict[str, Any]]:
        lines = trail(self.ws)
        fresh, self.seen = lines[self.seen:], len(lines)
        return fresh


def one(lines: list[dict[str, Any]], action: str, agent: str | None, result: str, face: str = "cli") -> dict[str, Any]:
    assert len(lines) == 1, lines
    line = lines[0]
    assert (line["action"], line["agent"], line["result"], line["face"]) == (action, agent, result, face), line
    assert line["user"] and line["client"] is None and line["token_id"] is None
    assert line["exit"] == (0 if result == "ok" else line["exit"]) and (result == "ok") == (line["exit"] == 0)
    return line


def until_state(ws: Workspace, name: str, state: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        states = {s["name"]: s.get("state") for s in ws.mam_json("status")["sessions"]}
        if states.get(name) == state:
            return
        assert time.monotonic() < deadline, f"{name} never reached {state}: {states}"
        time.sleep(0.2)


@tmux_only
def test_every_acting_command_writes_one_line_and_queries_none(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server = tmux.name()
    lines = Lines(ws)
    env = {**ws.env, "MAM_AUDIT_SECRET": "hunter2-value"}
    proc = ws.mam("spawn", "asks", "--agent", "claude", "--server", server, "--env", "MAM_AUDIT_SECRET",
                  "--command", sys.executable, "--", RECORDER, str(tmp_path / "read.log"), "--state", "blocked",
                  env=env)
    assert proc.returncode == 0, proc.stderr
    line = one(lines.new(), "spawn", "asks", "ok")
    assert line["arguments"]["env_names"] == ["MAM_AUDIT_SECRET"] and line["arguments"]["server"] == server
    # A value typed into --env by mistake: refused (exit 2), and its value is never written.
    proc = ws.mam("spawn", "other", "--server", server, "--env", "TOKEN=hunter2-typed", "--command", STAND_IN)
    assert proc.returncode == 2
    line = one(lines.new(), "spawn", "other", "refused")
    assert line["arguments"]["env_names"] == ["TOKEN=***"] and line["exit"] == 2
    until_state(ws, "asks", "blocked")
    # Queries write nothing.
    ws.mam_json("peek", "asks")
    ws.mam_json("ls", "--server", server)
    ws.mam_json("wait", "asks", "--until", "blocked", "--timeout", "20")
    ws.mam_json("reconcile")
    ws.mam_json("restore", "asks", "--dry-run")
    assert lines.new() == []
    # A prompt to a blocked agent is refused, and recorded as refused; its text is never written.
    proc = ws.mam("send", "asks", "deploy with password swordfish", "--enter")
    assert proc.returncode == 1 and "blocked on a question" in proc.stderr
    line = one(lines.new(), "send", "asks", "refused")
    assert line["arguments"]["text"] == {"chars": 30, "sha256": line["arguments"]["text"]["sha256"]}
    assert line["exit"] == 1 and "blocked on a question" in line["message"]
    # An answer, from a skill's script (MAM_FACE=skill).
    proc = ws.mam("send", "asks", "--answer", "1", "--enter", env={**ws.env, "MAM_FACE": "skill"})
    assert proc.returncode == 0, proc.stderr
    line = one(lines.new(), "send", "asks", "ok", face="skill")
    assert line["arguments"]["answer"] is True and line["arguments"]["text"]["chars"] == 1
    ws.mam_json("stop", "asks")
    one(lines.new(), "stop", "asks", "ok")
    proc = ws.mam("stop", "nobody", "--server", server)
    assert proc.returncode == 1
    one(lines.new(), "stop", "nobody", "refused")
    ws.mam_json("restore", "asks", "--trust-spec")
    one(lines.new(), "restore", "asks", "ok")
    ws.mam_json("spawn", "second", "--server", server, "--command", STAND_IN)
    one(lines.new(), "spawn", "second", "ok")
    assert ws.mam("stop", "--all", "--yes", "--server", server, "--json").returncode == 0
    stopped = lines.new()
    assert sorted((s["action"], s["agent"], s["result"]) for s in stopped) == [
        ("stop", "asks", "ok"), ("stop", "second", "ok")]
    ws.mam_json("forget", "asks")
    one(lines.new(), "forget", "asks", "ok")
    ws.mam_json("prune")
    one(lines.new(), "prune", "second", "ok")
    ws.mam_json("prune")
    one(lines.new(), "prune", None, "ok")  # ran, removed nothing
    ws.mam_json("spawn", "third", "--server", server, "--command", STAND_IN)
    one(lines.new(), "spawn", "third", "ok")
    tmux.run(server, "kill-session", "-t", "=third")
    doc = ws.mam_json("reconcile", "--apply")
    assert [d["name"] for d in doc["drifts"]] == ["third"], doc
    line = one(lines.new(), "reconcile", "third", "ok")
    assert line["message"].startswith("drift A")
    ws.mam_json("status")
    assert lines.new() == []
    text = (ws.root / ".mam" / "audit.jsonl").read_text()
    for secret in ("hunter2", "swordfish"):
        assert secret not in text


def test_a_view_action_is_the_top_face(ws: Workspace) -> None:
    """`mam top`'s actions (mam.live.actions) each run as face top, whatever thread runs them."""
    import threading

    from mam.audit import current_actor
    from mam.live.actions import Actions, as_top

    for action in ("spawn", "send", "answer", "stop", "restore"):
        assert hasattr(getattr(Actions, action), "__wrapped__"), f"Actions.{action} is not recorded as top's"
    seen: list[str] = []
    thread = threading.Thread(target=as_top(lambda: seen.append(current_actor().face)))
    thread.start()
    thread.join()
    assert seen == ["top"] and current_actor().face == "cli"


def test_the_line_keeps_what_it_may(tmp_path: Path) -> None:
    from mam.audit import Actor, acting, record

    dot = tmp_path / ".mam"
    with acting(Actor("serve", "ana", client="10.0.0.7", token_id="3f9a1c")):
        record(dot, "send", "a", {"text": "x" * 5000, "env_names": ["K=v"], "progress": print, "cwd": "/" * 300},
               {"result": "failed", "exit": 1, "message": "first line\nsecond"})
    record(dot, "stop", "b" * 10000, {"args": ["w"] * 100}, "ok", message="m" * 10000)
    raw = (dot / "audit.jsonl").read_bytes().splitlines(keepends=True)
    assert len(raw) == 2 and all(len(line) <= 4096 for line in raw)
    first, second = (json.loads(line) for line in raw)
    assert (first["face"], first["user"], first["client"], first["token_id"]) == ("serve", "ana", "10.0.0.7", "3f9a1c")
    assert first["arguments"]["text"]["chars"] == 5000 and first["arguments"]["env_names"] == ["K=***"]
    assert "progress" not in first["arguments"] and len(first["arguments"]["cwd"]) == 203
    assert (first["result"], first["exit"], first["message"]) == ("failed", 1, "first line")
    assert second["face"] == "cli" and len(second["agent"]) < 10000 and second["exit"] == 0
    assert second["time"] >= first["time"] and second["at"].endswith("Z")
    assert os.stat(dot / "audit.jsonl").st_mode & 0o777 == 0o600


WRITER = """
import os, sys, time
sys.path.insert(0, {root!r})
from mam.audit import trail
trail.ROTATE_AT, trail.KEEP = {rotate_at}, {keep}
from pathlib import Path
go = Path({go!r})
while not go.exists():
    time.sleep(0.005)
for i in range({count}):
    trail.record(Path({dot!r}), "send", f"w{{os.getpid()}}", {{"i": i, "pad": "p" * 900}}, "ok",
                 message=f"{{os.getpid()}}:{{i}}")
"""


def _writers(dot: Path, tmp_path: Path, processes: int, count: int, rotate_at: int, keep: int) -> None:
    go = tmp_path / "go"
    code = WRITER.format(root=str(ROOT), go=str(go), count=count, dot=str(dot), rotate_at=rotate_at, keep=keep)
    procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
             for _ in range(processes)]
    try:
        time.sleep(0.2)  # let them import: then all start at once
        go.touch()
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0 and not err, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _whole(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.splitlines()]  # a torn or interleaved line fails to parse


def test_twenty_writers_never_tear_or_interleave_a_line(tmp_path: Path) -> None:
    dot = tmp_path / ".mam"
    _writers(dot, tmp_path, 20, 200, rotate_at=1 << 40, keep=3)
    lines = _whole(dot / "audit.jsonl")
    assert len(lines) == 20 * 200
    seen = {line["message"] for line in lines}
    assert len(seen) == 4000  # each written once
    by_writer: dict[str, list[int]] = {}
    for line in lines:
        by_writer.setdefault(line["agent"], []).append(line["arguments"]["i"])
    assert len(by_writer) == 20 and all(order == list(range(200)) for order in by_writer.values())


def test_rotation_at_its_size_once_under_concurrency(tmp_path: Path) -> None:
    dot = tmp_path / ".mam"
    rotate_at = 50_000
    _writers(dot, tmp_path, 10, 100, rotate_at=rotate_at, keep=1000)
    files = sorted(dot.glob("audit.jsonl*"))
    rotated = [p for p in files if p.name != "audit.jsonl"]
    assert len(rotated) >= 5
    total = sum(len(_whole(p)) for p in files)
    assert total == 1000  # no line lost, none twice
    for path in rotated:  # a file rotated twice over would be small: each is one full turn
        assert path.stat().st_size >= rotate_at, (path.name, path.stat().st_size)
    assert (dot / "audit.jsonl").stat().st_size < rotate_at + 10 * 4096


def test_rotation_keeps_its_number_of_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mam.audit import trail

    monkeypatch.setattr(trail, "ROTATE_AT", 2000)
    dot = tmp_path / ".mam"
    for i in range(100):
        trail.record(dot, "stop", f"a{i}", {"pad": "p" * 150}, "ok")
    names = sorted(p.name for p in dot.glob("audit.jsonl*"))
    assert names == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2", "audit.jsonl.3"]
    kept = [int(line["agent"][1:]) for n in ("audit.jsonl.3", "audit.jsonl.2", "audit.jsonl.1", "audit.jsonl")
            for line in _whole(dot / n)]
    assert kept == list(range(kept[0], 100)) and kept[0] > 0  # newest last, the oldest file dropped
    assert all(os.stat(dot / n).st_size <= 2000 + 400 for n in names)


def test_a_line_that_cannot_be_written_fails_nothing(ws: Workspace) -> None:
    (ws.root / ".mam" / "audit.jsonl").mkdir(parents=True)  # not a file: cannot be appended to
    proc = ws.mam("prune", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["removed"] == []
    said = proc.stderr.strip().splitlines()
    assert len(said) == 1 and "audit line for prune was not written" in said[0], proc.stderr


def test_a_linked_trail_or_dot_mam_leading_outside_is_refused(ws: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "log"
    target.write_text("theirs\n")
    (ws.root / ".mam").mkdir()
    (ws.root / ".mam" / "audit.jsonl").symlink_to(target)
    proc = ws.mam("prune", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "symbolic link" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert target.read_text() == "theirs\n"
    proc = ws.mam("audit")
    assert proc.returncode == 1 and "cannot read the audit trail" in proc.stderr
    # A .mam leading outside: every command refuses it (exit 2), the trail's own writer too.
    from mam.audit import record

    (ws.root / ".mam" / "audit.jsonl").unlink()
    shutil.rmtree(ws.root / ".mam")
    (ws.root / ".mam").symlink_to(outside)
    assert ws.mam("prune").returncode == 2
    record(ws.root / ".mam", "stop", "a", {}, "ok")
    assert sorted(p.name for p in outside.iterdir()) == ["log"]
    # One that stays inside the workspace is followed, as every command follows it.
    (ws.root / ".mam").unlink()
    (ws.root / "state").mkdir()
    (ws.root / ".mam").symlink_to(ws.root / "state")
    record(ws.root / ".mam", "stop", "a", {}, "ok")
    assert len(_whole(ws.root / "state" / "audit.jsonl")) == 1


def test_mam_audit_filters_and_skips_what_is_not_its_own(ws: Workspace) -> None:
    from mam.audit import Actor, trail

    dot = ws.root / ".mam"
    dot.mkdir()
    now = time.time()
    for age, agent, face in ((7200, "a", "cli"), (1800, "b", "top"), (60, "a", "serve")):
        trail.append(dot, trail.line_of(Actor(face, "ana", "10.0.0.7" if face == "serve" else None),
                                        "stop", agent, {}, "ok", 0, "closed", now - age))
    with (dot / "audit.jsonl").open("ab") as handle:
        handle.write(b'{"action": "stop", "time": 1, "res\n["not", "an", "object"]\n\xff\xfe\n')
    doc = ws.mam_json("audit")
    assert [e["agent"] for e in doc["entries"]] == ["a", "b", "a"] and doc["skipped"] == 3
    assert [e["agent"] for e in ws.mam_json("audit", "--agent", "a")["entries"]] == ["a", "a"]
    assert [e["face"] for e in ws.mam_json("audit", "--since", "1h")["entries"]] == ["top", "serve"]
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 600))
    assert [e["face"] for e in ws.mam_json("audit", "--since", since)["entries"]] == ["serve"]
    limited = ws.mam_json("audit", "--limit", "1")
    assert [e["face"] for e in limited["entries"]] == ["serve"] and limited["matched"] == 3
    proc = ws.mam("audit")
    assert proc.returncode == 0 and "3 line(s) of the audit trail are not its own" in proc.stderr
    table = proc.stdout.splitlines()
    assert table[0].split() == ["TIME", "WHO", "FACE", "ACTION", "AGENT", "RESULT", "MESSAGE"]
    assert len(table) == 4 and "ana@10.0.0.7" in table[3]
    for bad in (("--since", "yesterday"), ("--limit", "-1")):
        assert ws.mam("audit", *bad).returncode == 2


def test_mam_audit_with_no_trail(ws: Workspace) -> None:
    doc = ws.mam_json("audit")
    assert doc["entries"] == [] and doc["skipped"] == 0
    assert not (ws.root / ".mam").exists()  # a reader makes nothing


def test_status_never_loads_the_audit_trail(ws: Workspace) -> None:
    code = ("import sys, runpy\nsys.argv = ['mam', 'status', '--json']\n"
            "try:\n    runpy.run_module('mam', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], env=ws.env, cwd=ws.root, capture_output=True, text=True,
                          timeout=60)
    modules = set(proc.stderr.rsplit("MODULES ", 1)[1].split())
    assert "mam.cli.app" in modules and not {m for m in modules if m.startswith("mam.audit")}
