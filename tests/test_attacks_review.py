"""The weaknesses an attacker's review found, each closed: markup in a notification, a secret cut in half in the
registry, a report file that is a link, non-UTF-8 text, a Codex line mam did not write."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from conftest import Workspace
from mam.agents.remains import LINE_CHARS, row_fields
from mam.hooks.report import identity
from mam.live.notify import notification_argv
from mam.plugin.records import Remains


def test_a_notifications_body_escapes_markup() -> None:
    change = {"name": "a<b>", "to": "blocked", "backend": "tmux", "server": "s&<i>x</i>", "host": None,
              "evidence": {"line": "Allow <b>rm</b> & go? >"}}
    argv = notification_argv(change)
    body = argv[-1]
    assert "<" not in body and ">" not in body and "& " not in body
    assert body == "tmux server s&amp;&lt;i&gt;x&lt;/i&gt;: Allow &lt;b&gt;rm&lt;/b&gt; &amp; go? &gt;"


def test_spawn_removes_an_old_report_without_following_a_link(tmp_path: Path) -> None:
    dot = tmp_path / ".mam"
    (dot / "reports").mkdir(parents=True)
    victim = tmp_path / "victim.json"
    victim.write_text("keep")
    (dot / "reports" / "a.json").symlink_to(victim)
    (dot / "reports" / "b.json").write_text("{}")
    assert identity(True, False, "a", dot) == ["MAM_AGENT=a", f"MAM_WORKSPACE={tmp_path}"]
    identity(True, False, "b", dot)
    assert not (dot / "reports" / "a.json").is_symlink() and victim.read_text() == "keep"
    assert not (dot / "reports" / "b.json").exists()
    # A reports folder that is a link is never followed: the file in its target stays.
    other = tmp_path / "other"
    other.mkdir()
    (other / "c.json").write_text("keep")
    (dot / "reports").rename(tmp_path / "old-reports")
    (dot / "reports").symlink_to(other)
    identity(True, False, "c", dot)
    assert (other / "c.json").read_text() == "keep"


def test_a_kept_last_line_has_its_secret_hidden_before_it_is_cut() -> None:
    secret = "sk-" + "Q7x" * 10  # 33 characters
    # The line is cut at LINE_CHARS: the secret straddles the cut, 5 of its characters before it.
    line = "x" * (LINE_CHARS - 3 - 5) + secret + " tail"
    app = SimpleNamespace(env={"API_KEY": secret})
    row = SimpleNamespace(spec={"env_names": ["API_KEY"]})
    kept = row_fields(app, row, Remains(exit_status=1, lines=(line, f"key={secret}")), "now")  # type: ignore[arg-type]
    assert kept["last_output"][1] == "key=***"
    assert secret[:5] not in kept["last_output"][0] and "x*** tail" in kept["last_output"][0]
    assert len(kept["last_output"][0]) <= LINE_CHARS


BAD = "a\udcffb"  # the byte 0xff, as argv hands it to Python (surrogateescape)


def test_send_and_spawn_refuse_text_that_is_not_utf8(ws: Workspace) -> None:
    bad_file = ws.root / "bad.txt"
    bad_file.write_bytes(b"a\xffb\n")
    for args in (("send", "x", BAD), ("send", "x", "--file", str(bad_file)),
                 ("--backend", "tmux", "spawn", "y", "--server", "u9", "--command", "sleep", "--", BAD),
                 ("--backend", "tmux", "spawn", "y", "--server", "u9", "--command", BAD),
                 ("--backend", "tmux", "spawn", "y", "--server", "u9", "--command", "sleep", "--env", "BADV", "--",
                  "1")):
        proc = ws.mam(*args, env={**ws.env, "BADV": BAD})
        assert proc.returncode == 2, (args, proc.stderr)
        assert "UTF-8" in proc.stderr and "Traceback" not in proc.stderr and "internal error" not in proc.stderr
        assert proc.stderr.count("\n") <= 2  # the message and its hint
        assert BAD not in proc.stderr or "--env" not in args  # an --env value is never shown
    assert not (ws.root / ".mam" / "agent-sessions.yaml").exists() or "name: y" not in (
        ws.root / ".mam" / "agent-sessions.yaml").read_text()
