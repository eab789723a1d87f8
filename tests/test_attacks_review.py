"""The weaknesses an attacker's review found, each closed: markup in a notification, a secret cut in half in the
registry, a report file that is a link, non-UTF-8 text, a Codex line mam did not write."""

from __future__ import annotations

from mam.notify import notification_argv


def test_a_notifications_body_escapes_markup() -> None:
    change = {"name": "a<b>", "to": "blocked", "backend": "tmux", "server": "s&<i>x</i>", "host": None,
              "evidence": {"line": "Allow <b>rm</b> & go? >"}}
    argv = notification_argv(change)
    body = argv[-1]
    assert "<" not in body and ">" not in body and "& " not in body
    assert body == "tmux server s&amp;&lt;i&gt;x&lt;/i&gt;: Allow &lt;b&gt;rm&lt;/b&gt; &amp; go? &gt;"
