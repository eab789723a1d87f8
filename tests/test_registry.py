"""The registry file: both forms, validation with file and line, round trips, atomic serialized writes."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Workspace
from mam import registry
from mam.registry import text as registry_text
from mam.util.errors import MamError

BOTH_FORMS = """\
version: 1
sessions:
  - name: creator-claude-01
    backend: herdr
    server: live-srv
    status: running
    agent: claude
    pane: {cwd: /repo, id: "w1:p2"}
    created_at: "2026-12-02T09:00:00Z"
  - name: tmux-one
    backend: tmux
    server: t1
herdr_sessions:
  - name: ghost-creator-claude
    status: stopped
    herdr_session: ghost-srv
    pane: {cwd: /tmp/x}
"""


def test_both_forms_load(tmp_path: Path) -> None:
    path = tmp_path / "agent-sessions.yaml"
    path.write_text(BOTH_FORMS)
    reg = registry.load(path, "herdr")
    assert [(r.list_key, r.key, r.status, r.active) for r in reg.rows] == [
        ("sessions", ("herdr", "live-srv", "creator-claude-01", ""), "running", True),
        ("sessions", ("tmux", "t1", "tmux-one", ""), None, False),
        ("herdr_sessions", ("herdr", "ghost-srv", "ghost-creator-claude", ""), "stopped", False),
    ]
    assert reg.rows[0].pane_id == "w1:p2" and reg.rows[2].cwd == "/tmp/x"


def test_missing_file_is_empty(tmp_path: Path) -> None:
    reg = registry.load(tmp_path / "nope.yaml", "herdr")
    assert reg.rows == () and not reg.exists


def test_default_backend_comes_from_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("sessions:\n  - {name: a, server: s}\n")
    assert registry.load(path, "tmux").rows[0].backend == "tmux"


INVALID = {
    "not yaml": ("sessions: [\n  - name: a\n", 2),
    # PyYAML finds these wrong only on the next line (its problem mark); the line to fix is the one before.
    "a key without its colon": ("version: 1\nsessions:\n- name: a\n  server s1\n  status: running\n", 4),
    "an open quote": ('sessions:\n  - name: "a\n    server: s\n', 2),
    "an unclosed row": ('sessions:\n- {"name": "a", "server": "s"\n- {"name": "b", "server": "s"}\n', 2),
    "row without name": ("version: 1\nsessions:\n  - name: a\n    server: s\n  - server: s\n    status: x\n", 5),
    "duplicate name in one server": ("sessions:\n  - {name: a, server: s}\n  - {name: b, server: s}\n"
                                     "  - {name: a, server: s}\n", 4),
    "duplicate across the two forms": ("sessions:\n  - {name: a, server: s, backend: herdr}\n"
                                       "herdr_sessions:\n  - {name: a, herdr_session: s}\n", 4),
    "wrong type for status": ("sessions:\n  - name: a\n    server: s\n    status: 7\n", 4),
    "name is a number": ("sessions:\n  - name: 0123\n    server: s\n", 2),
    "pane is not a mapping": ("sessions:\n  - name: a\n    server: s\n    pane: /repo\n", 4),
    "name reads as an option": ("sessions:\n  - {name: a, server: s}\n  - name: -L\n    server: s\n", 3),
    "server with shell characters": ("sessions:\n  - name: a\n    server: 'x;rm -rf ~'\n", 3),
    "row is a string": ("sessions:\n  - just-a-string\n", 2),
    "sessions is a mapping": ("sessions:\n  name: a\n", 2),
    "top level is a list": ("- a\n- b\n", 1),
    "unknown version": ("version: 2\nsessions: []\n", 1),
    "row without server": ("sessions:\n  - name: a\n", 2),
}


@pytest.mark.parametrize(("text", "line"), INVALID.values(), ids=list(INVALID))
def test_invalid_registry_names_file_and_line(tmp_path: Path, text: str, line: int | None) -> None:
    path = tmp_path / "agent-sessions.yaml"
    path.write_text(text)
    with pytest.raises(MamError) as info:
        registry.load(path, "herdr")
    assert info.value.code == "invalid_registry"
    expected = f"{path}:{line}: " if line else f"{path}: "
    assert info.value.message.startswith(expected), info.value.message


@pytest.mark.parametrize("text", [INVALID[k][0] for k in ("not yaml", "row without name",
                                                           "duplicate name in one server",
                                                           "wrong type for status", "name reads as an option",
                                                           "server with shell characters")],
                         ids=["not yaml", "no name", "duplicate", "wrong type", "option name", "shell server"])
def test_invalid_registry_is_exit_2_and_never_rewritten(ws: Workspace, text: str) -> None:
    ws.write_registry(text)
    before = ws.registry.read_bytes()
    for args in (["status"], ["reconcile"], ["reconcile", "--apply"], ["reconcile", "--apply", "--adopt"]):
        proc = ws.mam(*args, "--json")
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith(f"mam: {ws.registry}:")
        assert "Traceback" not in proc.stderr
        assert json.loads(proc.stdout)["error"]["code"] == "invalid_registry"
        assert ws.registry.read_bytes() == before
    assert ws.herdr.calls() == []  # refused before any backend process


def _bump(row_doc: dict[str, Any], rows: tuple[registry.Row, ...]) -> bool:
    row_doc.setdefault("sessions", []).append({"name": f"r{len(row_doc['sessions'])}", "server": "s"})
    return True


def _writer(path: str, count: int, tag: str) -> None:
    """Spawn-like adds, mixed with --apply-like passes that rewrite the status of every row."""
    for i in range(count):
        def add(doc: dict[str, Any], rows: tuple[registry.Row, ...], i: int = i) -> bool:
            doc.setdefault("sessions", []).append({"name": f"{tag}-{i}", "server": "s", "status": "running"})
            return True

        def apply(doc: dict[str, Any], rows: tuple[registry.Row, ...]) -> bool:
            for row in rows:
                row.raw[f"seen_by_{tag}"] = row.raw.get(f"seen_by_{tag}", 0) + 1
            return True

        registry.update(Path(path), "herdr", add)
        if i % 4 == 3:
            registry.update(Path(path), "herdr", apply)


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / ".mam" / "agent-sessions.yaml"
    ctx = multiprocessing.get_context("fork")
    # 8 writers, each 50 read-modify-writes: 40 spawn-like adds and 10 --apply-like passes over every row
    procs = [ctx.Process(target=_writer, args=(str(path), 40, f"w{n}")) for n in range(8)]
    for p in procs:
        p.start()
    seen_invalid = reads = 0
    while any(p.is_alive() for p in procs):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        reads += 1
        try:
            registry.parse(text, path, "herdr")  # as YAML
        except MamError:
            seen_invalid += 1
        if registry_text.fast_load(text) is None:  # and the fast way: only mam writes, so it always applies
            seen_invalid += 1
    for p in procs:
        p.join()
        assert p.exitcode == 0
    reg = registry.load(path, "herdr")
    names = sorted(r.name for r in reg.rows)
    assert names == sorted(f"w{n}-{i}" for n in range(8) for i in range(40))  # none lost, none twice
    # every apply pass of writer n saw (and kept) every row that existed then: the first row saw them all
    first = reg.rows[0].raw
    assert all(first.get(f"seen_by_w{n}") == 10 for n in range(8)), first
    assert seen_invalid == 0 and reads > 10  # the reader polled throughout and never saw a partial file
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_update_keeps_unknown_keys_order_and_lists(tmp_path: Path) -> None:
    path = tmp_path / "agent-sessions.yaml"
    path.write_text("version: 1\nowner: team-a\nsessions:\n  - {zeta: 1, name: a, server: s, alpha: [1, 2]}\n"
                    "herdr_sessions:\n  - {name: b, herdr_session: h, extra: {deep: true}}\n")

    def change(doc: dict[str, Any], rows: tuple[registry.Row, ...]) -> bool:
        rows[1].raw["status"] = "stopped"
        return True

    registry.update(path, "herdr", change)
    data = yaml.safe_load(path.read_text())
    assert list(data) == ["version", "owner", "sessions", "herdr_sessions"]
    assert list(data["sessions"][0]) == ["zeta", "name", "server", "alpha"]
    assert data["herdr_sessions"][0] == {"name": "b", "herdr_session": "h", "extra": {"deep": True},
                                         "status": "stopped"}


def test_update_refuses_a_change_that_would_make_the_file_invalid(tmp_path: Path) -> None:
    path = tmp_path / "agent-sessions.yaml"
    path.write_text("sessions:\n  - {name: a, server: s}\n")
    before = path.read_bytes()

    def change(doc: dict[str, Any], rows: tuple[registry.Row, ...]) -> bool:
        doc["sessions"].append({"name": "a", "server": "s"})
        return True

    with pytest.raises(MamError):
        registry.update(path, "herdr", change)
    assert path.read_bytes() == before


def test_failed_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "agent-sessions.yaml"
    path.write_text("sessions:\n  - {name: a, server: s, status: running}\n")
    before = path.read_bytes()

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)

    def change(doc: dict[str, Any], rows: tuple[registry.Row, ...]) -> bool:
        rows[0].raw["status"] = "terminated"
        return True

    with pytest.raises(MamError) as info:
        registry.update(path, "herdr", change)
    assert info.value.code == "operation_failed" and "No space left" in info.value.message
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["agent-sessions.yaml", "agent-sessions.yaml.lock"] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["agent-sessions.yaml", "agent-sessions.yaml.lock"]


def _writer_forever(path: str) -> None:
    n = 0
    while True:
        n += 1

        def change(doc: dict[str, Any], rows: tuple[registry.Row, ...], n: int = n) -> bool:
            doc.setdefault("sessions", []).append({"name": f"k-{os.getpid()}-{n}", "server": "s",
                                                   "note": "x" * 2000})
            return True

        registry.update(Path(path), "herdr", change)


def test_a_writer_killed_at_random_points_never_leaves_a_partial_file(tmp_path: Path) -> None:
    import random
    import signal
    import time

    path = tmp_path / ".mam" / "agent-sessions.yaml"
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(7)
    for _ in range(8):
        before = registry.load(path, "herdr").rows if path.exists() else ()
        proc = ctx.Process(target=_writer_forever, args=(str(path),))
        proc.start()
        time.sleep(rng.uniform(0.05, 0.3))
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        after = registry.load(path, "herdr").rows  # parses: the old file or a new one, never a partial one
        assert [r.name for r in after][: len(before)] == [r.name for r in before]  # nothing written is lost

        def one_more(doc: dict[str, Any], rows: tuple[registry.Row, ...]) -> bool:
            doc.setdefault("sessions", []).append({"name": f"after-{len(rows)}", "server": "s"})
            return True

        registry.update(path, "herdr", one_more)  # the next write succeeds (the lock died with the writer)
        assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def _add_row(name: str) -> registry.Change:
    def change(doc: dict[str, Any], rows: tuple[registry.Row, ...]) -> bool:
        doc.setdefault("sessions", []).append({"name": name, "server": "s"})
        return True
    return change


def test_a_mam_write_is_yaml_with_one_json_row_per_line_read_without_the_yaml_parser(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mam.registry import yamlio

    path = tmp_path / "agent-sessions.yaml"
    registry.update(path, "herdr", _add_row("a"))
    registry.update(path, "herdr", _add_row("b"))
    text = path.read_text()
    assert text == ('version: 1\nsessions:\n- {"name": "a", "server": "s"}\n- {"name": "b", "server": "s"}\n')
    assert yaml.safe_load(text) == {"version": 1, "sessions": [{"name": "a", "server": "s"},
                                                                 {"name": "b", "server": "s"}]}

    def no_yaml(text: str) -> Any:
        raise AssertionError("the YAML parser ran on a file mam wrote")

    monkeypatch.setattr(yamlio, "load", no_yaml)
    assert [r.name for r in registry.load(path, "herdr").rows] == ["a", "b"]


@pytest.mark.parametrize("text", [
    'version: 1\nsessions:\n- {"name": "a", "server": "s"}  # a comment\n',
    'version: 1\nsessions:\n- {"name": "a",  "server": "s"}\n',  # not spaced as mam writes it
    'version: 1\nsessions:\n- {"name": "a", "server": "s", "n": 1e5}\n',  # YAML 1.1 reads 1e5 as a string
    'version: 1\nsessions:\n- {"name": "a", "server": "s", "x": "\\ud83d\\ude00"}\n',  # a surrogate pair
    'version: 1\nowner: me\nsessions:\n- {"name": "a", "server": "s"}\n',
    'version: 1\nsessions:\n  - {"name": "a", "server": "s"}\n',
    'version: 1\nsessions:\n- {"name": "a", "server": "s"}\nsessions: []\n',
    'sessions:\nherdr_sessions: []\n',
])
def test_any_other_text_is_read_by_yaml_with_the_same_result(tmp_path: Path, text: str) -> None:
    from mam.registry import text as registry_text
    from mam.registry import yamlio

    path = tmp_path / "agent-sessions.yaml"
    path.write_text(text)
    line = None
    try:
        expected: Any = yamlio.load(text) or {}
    except yamlio.YAMLError as exc:  # not valid YAML, or YAML mam refuses (here: `sessions:` twice)
        expected, line = "refused", yamlio.error_line(exc)
    assert registry_text.fast_load(text) in (None, expected)
    try:
        assert registry.load(path, "herdr").document == expected
    except MamError as exc:
        assert expected == "refused" and exc.message.startswith(f"{path}:{line}: "), exc.message


def test_a_hand_edited_duplicate_in_mam_form_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "agent-sessions.yaml"
    registry.update(path, "herdr", _add_row("a"))
    with path.open("a") as handle:
        handle.write('- {"name": "a", "server": "s"}\n')
    with pytest.raises(MamError) as info:
        registry.load(path, "herdr")
    assert info.value.message.startswith(f"{path}:4:")


def test_an_invalid_file_in_mam_form_is_never_rewritten_either(ws: Workspace) -> None:
    ws.write_registry('version: 1\nsessions:\n- {"name": "a", "server": "s1", "status": "running"}\n'
                      '- {"name": "a", "server": "s1", "status": "running"}\n')
    before = ws.registry.read_bytes()
    for args in (["status"], ["reconcile", "--apply"]):
        proc = ws.mam(*args, "--json")
        assert proc.returncode == 2 and proc.stderr.startswith(f"mam: {ws.registry}:4: duplicate name"), proc.stderr
    assert ws.registry.read_bytes() == before


def test_queries_write_nothing_beside_the_registry(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: a, server: s1, status: running}\n")
    for args in (["status"], ["reconcile"]):
        assert ws.mam(*args).returncode == 0
    assert sorted(p.name for p in ws.registry.parent.iterdir()) == ["agent-sessions.yaml"]


def test_a_misspelt_sessions_key_is_refused_instead_of_hiding_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "agent-sessions.yaml"
    path.write_text("version: 1\nsesions:\n  - {name: a, server: s}\nnotes: kept as they are\n")
    with pytest.raises(MamError) as caught:
        registry.load(path, "herdr")
    assert caught.value.code == "invalid_registry"
    assert ":2:" in caught.value.message and "did you mean `sessions:`" in caught.value.message
    path.write_text("version: 1\nsessions: []\nnotes: kept as they are\n")  # an unrelated key stays allowed
    assert registry.load(path, "herdr").rows == ()
