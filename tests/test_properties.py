"""Property tests: classification never guesses "down"; any registry document loads or is refused cleanly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mam import registry
from mam.plugin.records import CommandResult, ErrorKind, Failure
from mam.util.errors import MamError
from mam_herdr.backend import HerdrBackend
from mam_tmux.backend import TmuxBackend
from mam_zellij.backend import ZellijBackend

HERDR_DOWN = '{"error":{"code":"server_not_running"}}'
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)
codes = st.sampled_from([None, 0, 1, 2, 127, -9])


def _json_text() -> st.SearchStrategy[str]:
    leaves = st.none() | st.booleans() | st.integers() | st.sampled_from(["server_not_running", "error", "code"])
    values = st.recursive(leaves, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
        st.sampled_from(["error", "code", "message", "id", "result"]), kids, max_size=3), max_leaves=8)
    return values.map(lambda v: json.dumps(v, separators=(",", ":")))


def _is_herdr_signal(stderr: str) -> bool:
    try:
        doc = json.loads(stderr.strip())
    except ValueError:
        return False
    return (isinstance(doc, dict) and isinstance(doc.get("error"), dict)
            and doc["error"].get("code") == "server_not_running" and "\n" not in stderr.strip())


@settings(max_examples=300, deadline=None)
@given(stderr=texts | _json_text(), stdout=texts, code=codes)
def test_herdr_down_only_on_its_exact_signal(stderr: str, stdout: str, code: int | None) -> None:
    failure = Failure("herdr", "s", CommandResult(("herdr", "--session", "s", "agent", "list"), code, stdout, stderr))
    result = HerdrBackend().classify(failure)
    if result is not None and result.kind is ErrorKind.SERVER_DOWN:
        assert code == 1 and not stdout.strip() and _is_herdr_signal(stderr)


@settings(max_examples=300, deadline=None)
@given(prefix=texts, stderr=texts, code=codes)
def test_tmux_down_only_on_its_messages(prefix: str, stderr: str, code: int | None) -> None:
    failure = Failure("tmux", "s", CommandResult(("tmux", "-N", "-L", "s", "list-panes"), code, "", stderr))
    result = TmuxBackend().classify(failure)
    if result is not None and result.kind is ErrorKind.SERVER_DOWN:
        first = next(line.strip() for line in stderr.splitlines() if line.strip())
        assert code not in (None, 0)
        assert first.startswith(("no server running on ", "error connecting to ")) or first in (
            "server exited unexpectedly", "lost server")
        if first.startswith("error connecting to "):
            assert first.endswith("(No such file or directory)")


@settings(max_examples=200, deadline=None)
@given(stdout=texts, stderr=texts, code=codes)
def test_zellij_never_down_on_unreadable_text(stdout: str, stderr: str, code: int | None) -> None:
    failure = Failure("zellij", "s", CommandResult(("zellij", "list-sessions", "-n"), code, stdout, stderr))
    result = ZellijBackend().classify(failure)
    if result is not None and result.kind is ErrorKind.SERVER_DOWN:
        no_sessions = "No active zellij sessions found."
        assert (stderr.strip() == no_sessions and not stdout.strip()) or \
            (stdout.strip() == no_sessions and not stderr.strip()) or not stderr.strip()


def test_the_exact_signals_are_down() -> None:
    herdr = Failure("herdr", "s", CommandResult(("herdr",), 1, "", HERDR_DOWN + "\n"))
    assert HerdrBackend().classify(herdr).kind is ErrorKind.SERVER_DOWN  # type: ignore[union-attr]


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12) | st.sampled_from(["running", "s1", "-L"]),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.sampled_from(["name", "server", "backend", "status", "agent", "pane", "herdr_session", "sessions",
                         "herdr_sessions", "version", "extra"]), kids, max_size=5),
    max_leaves=20)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=yaml_values)
def test_any_document_loads_or_is_refused_with_a_message(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "agent-sessions.yaml"
    path.write_text(yaml.safe_dump(document))
    try:
        reg = registry.load(path, "herdr")
    except MamError as exc:
        assert exc.code == "invalid_registry" and exc.message.startswith(str(path))
        return
    for row in reg.rows:
        assert row.name and row.server and row.backend


names = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(names, st.dictionaries(st.sampled_from(["zeta", "team", "note"]),
                                                      st.text(max_size=8) | st.integers(), max_size=3)),
                     max_size=6, unique_by=lambda r: r[0]))
def test_round_trip_keeps_unknown_keys_and_order(tmp_path: Path, rows: list[tuple[str, dict[str, Any]]]) -> None:
    path = tmp_path / "agent-sessions.yaml"
    original = {"version": 1, "owner": "x", "sessions": [{**extra, "name": n, "server": "s"} for n, extra in rows]}
    path.write_text(yaml.safe_dump(original, sort_keys=False))

    def touch(document: dict[str, Any], found: tuple[registry.Row, ...]) -> bool:
        for row in found:
            row.raw["status"] = "stopped"
        return True

    registry.update(path, "herdr", touch)
    after = yaml.safe_load(path.read_text())
    assert list(after) == ["version", "owner", "sessions"]
    for before, now in zip(original["sessions"], after["sessions"], strict=True):
        assert list(now) == [*before, "status"] if "status" not in before else list(before)
        assert {k: v for k, v in now.items() if k != "status"} == before


@pytest.mark.parametrize("text", ["", "\n", "---\n", "version: 1\n", "sessions: []\n", "sessions:\n"])
def test_empty_forms_are_empty_registries(tmp_path: Path, text: str) -> None:
    path = tmp_path / "agent-sessions.yaml"
    path.write_text(text)
    assert registry.load(path, "herdr").rows == ()


any_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
row_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(any_text, kids, max_size=3), max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(document=st.dictionaries(st.sampled_from(["version", "sessions", "herdr_sessions", "owner"]),
                                st.lists(st.dictionaries(any_text, row_values, max_size=4), max_size=4)
                                | row_values, max_size=4))
def test_what_mam_writes_reads_back_the_same_through_yaml_and_the_fast_path(document: dict[str, Any]) -> None:
    from mam.registry import text as registry_text
    from mam.registry import yamlio

    text = registry_text.dump(document)
    assert yamlio.load(text) == (document or None)  # the file is YAML, and says exactly the document
    fast = registry_text.fast_load(text)
    assert fast is None or fast == document  # the fast path never reads anything else


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(st.dictionaries(st.sampled_from(["name", "server", "status", "note", "n"]),
                                     st.text(max_size=6) | st.integers() | st.booleans(), max_size=4),
                     min_size=1, max_size=3),
       edits=st.lists(st.tuples(st.integers(min_value=0), st.sampled_from(["insert", "delete", "replace"]),
                                st.sampled_from(list(' "\\:,{}[]#-\n\t\'0eE.xu&*') + [
                                    "\\u0041", "1e5", "\u2028", "&a ", "*a", '"name": "x", ', "\nsessions:\n"])),
                      min_size=1, max_size=3))
def test_a_hand_edit_of_a_mam_written_file_is_never_read_differently_by_the_fast_path(
        rows: list[dict[str, Any]], edits: list[tuple[int, str, str]]) -> None:
    from mam.registry import text as registry_text
    from mam.registry import yamlio

    text = registry_text.dump({"version": 1, "sessions": rows})
    for position, kind, piece in edits:
        at = position % (len(text) + 1)
        if kind == "insert":
            text = text[:at] + piece + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + 1:]
        else:
            text = text[:at] + piece + text[at + 1:]
    fast = registry_text.fast_load(text)
    try:
        expected = yamlio.load(text)
    except yamlio.YAMLError:
        assert fast is None  # YAML refuses it: so must the fast path, so the error can name the line
        return
    assert fast is None or fast == expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.dictionaries(st.sampled_from(["status", "agent", "note"]), yaml_values, max_size=3),
                     min_size=1, max_size=3),
       shared=st.lists(st.integers(), min_size=1, max_size=3), at=st.integers(min_value=0))
def test_a_value_written_twice_as_an_alias_is_refused_with_a_line(tmp_path: Path, rows: list[dict[str, Any]],
                                                                  shared: list[int], at: int) -> None:
    """PyYAML writes one object held twice as an anchor and an alias: mam refuses such a file, whatever
    else it holds, before anything expands it."""
    document = {"version": 1, "sessions": [{"name": f"a{i}", "server": "s", **row} for i, row in enumerate(rows)]}
    document["sessions"][at % len(rows)]["extra"] = shared
    document["owner"] = shared
    path = tmp_path / "agent-sessions.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    assert "&id" in path.read_text()
    with pytest.raises(MamError) as info:
        registry.load(path, "herdr")
    assert info.value.code == "invalid_registry"
    assert info.value.message.startswith(f"{path}:") and "anchors and aliases" in info.value.message


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.dictionaries(st.sampled_from(["status", "agent", "note"]), st.text(max_size=6),
                                     max_size=3), min_size=1, max_size=4),
       at=st.integers(min_value=0), which=st.integers(min_value=0))
def test_a_key_written_twice_in_a_hand_edited_row_is_refused_with_its_line(
        tmp_path: Path, rows: list[dict[str, Any]], at: int, which: int) -> None:
    document = {"version": 1, "sessions": [{"name": f"a{i}", "server": "s", **row} for i, row in enumerate(rows)]}
    row = document["sessions"][at % len(rows)]
    key = list(row)[which % len(row)]
    lines = yaml.safe_dump(document, sort_keys=False).splitlines(keepends=True)
    row_start = [n for n, line in enumerate(lines) if line.startswith("- name: ")][at % len(rows)]
    lines.insert(row_start + 1, f"  {key}: again\n")  # a second `key:` inside that row, as a hand edit would
    path = tmp_path / "agent-sessions.yaml"
    path.write_text("".join(lines))
    before = path.read_bytes()
    with pytest.raises(MamError) as info:
        registry.load(path, "herdr")
    message = info.value.message
    assert message.startswith(f"{path}:") and f"duplicate key {key!r}" in message, message
    line = int(message[len(f"{path}:"):].split(":")[0])
    assert lines[line - 1].lstrip("- ").startswith(f"{key}:")  # the line of one of the two
    with pytest.raises(MamError):
        registry.update(path, "herdr", lambda document, found: True)
    assert path.read_bytes() == before
