"""`mam forget` and `mam prune`: the registry can shrink, under its lock, and never loses a live row by accident."""

from __future__ import annotations

import json

from conftest import Tmux, Workspace

ROWS = """version: 1
sessions:
- {"name": "old", "backend": "herdr", "server": "s", "status": "terminated", "terminated_at": "2020-01-01T00:00:00Z"}
- {"name": "new", "backend": "herdr", "server": "s", "status": "stopped", "stopped_at": "2999-01-01T00:00:00Z"}
- {"name": "live", "backend": "herdr", "server": "s", "status": "running", "created_at": "2020-01-01T00:00:00Z"}
- {"name": "other", "backend": "tmux", "server": "t", "status": "terminated"}
"""


def _names(ws: Workspace) -> list[str]:
    return [s["name"] for s in ws.mam_json("status", env={**ws.env, "MAM_TIMEOUT": "1"})["sessions"]]


def test_prune_removes_gone_rows_only(ws: Workspace) -> None:
    ws.write_registry(ROWS)
    doc = ws.mam_json("prune")
    assert [e["name"] for e in doc["removed"]] == ["new", "old", "other"]
    assert _names(ws) == ["live"]


def test_prune_older_than_and_dry_run(ws: Workspace) -> None:
    ws.write_registry(ROWS)
    before = ws.registry.read_bytes()
    dry = ws.mam_json("prune", "--older-than", "30", "--dry-run")
    assert [e["name"] for e in dry["removed"]] == ["old"]  # "other" has no time: its age is unknown
    assert dry["dry_run"] is True
    assert ws.registry.read_bytes() == before
    ws.mam_json("prune", "--older-than", "30")
    assert sorted(_names(ws)) == ["live", "new", "other"]


def test_prune_refuses_a_status_no_row_has_with_a_did_you_mean(ws: Workspace) -> None:
    ws.write_registry(ROWS.replace('"status": "stopped"', '"status": "parked"'))  # a word of a hand edit
    before = ws.registry.read_bytes()
    proc = ws.mam("prune", "--status", "termintaed", "--dry-run")
    assert proc.returncode == 2 and "--status 'termintaed': no row has that status" in proc.stderr
    assert "did you mean 'terminated'?" in proc.stderr
    proc = ws.mam("prune", "--status", "stopped,bogus")
    assert proc.returncode == 2 and "'bogus'" in proc.stderr
    assert "statuses here: parked, stopped, terminated" in proc.stderr
    assert ws.registry.read_bytes() == before
    # a status mam writes, or one a row carries, is fine even when nothing is removed
    assert ws.mam_json("prune", "--status", "stopped")["removed"] == []
    assert [e["name"] for e in ws.mam_json("prune", "--status", "parked")["removed"]] == ["new"]


def test_prune_refuses_active_statuses(ws: Workspace) -> None:
    ws.write_registry(ROWS)
    before = ws.registry.read_bytes()
    proc = ws.mam("prune", "--status", "running")
    assert proc.returncode == 2
    assert "never removes active rows" in proc.stderr
    assert ws.registry.read_bytes() == before


def test_forget_takes_one_row_and_keeps_the_others_bytes(ws: Workspace) -> None:
    ws.write_registry(ROWS)
    doc = ws.mam_json("forget", "old")
    assert doc["removed"] == [{"name": "old", "backend": "herdr", "server": "s", "host": None,
                              "status": "terminated"}]
    assert sorted(_names(ws)) == ["live", "new", "other"]


def test_forget_of_an_active_row_needs_force(ws: Workspace) -> None:
    ws.write_registry(ROWS)
    before = ws.registry.read_bytes()
    proc = ws.mam("forget", "live")
    assert proc.returncode == 1
    assert "may still be running" in proc.stderr and "--force" in proc.stderr
    assert ws.registry.read_bytes() == before
    ws.mam_json("forget", "live", "--force")
    assert "live" not in _names(ws)


def test_forget_of_an_unknown_name_fails_and_writes_nothing(ws: Workspace) -> None:
    ws.write_registry(ROWS)
    before = ws.registry.read_bytes()
    proc = ws.mam("forget", "old", "nobody", "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error"]["code"] == "operation_failed"
    assert "no agent nobody" in proc.stderr
    assert ws.registry.read_bytes() == before


def test_forget_legacy_rows(ws: Workspace) -> None:
    ws.write_registry("herdr_sessions:\n- name: a\n  herdr_session: s\n  status: stopped\n"
                      "- name: b\n  herdr_session: s\n  status: stopped\n")
    ws.mam_json("forget", "a")
    assert _names(ws) == ["b"]


def test_forget_bad_name_is_refused(ws: Workspace) -> None:
    proc = ws.mam("forget", "-x")
    assert proc.returncode == 2


def test_stop_and_forget_find_a_row_of_any_backend(ws: Workspace, tmux: Tmux) -> None:
    """A tmux agent spawned with --backend tmux is stopped and forgotten by name alone: its row says tmux."""
    env = {k: v for k, v in ws.env.items() if k != "MAM_BACKEND"}  # the workspace's default stays herdr
    server = tmux.name()
    proc = ws.mam("--backend", "tmux", "spawn", "t1", "--server", server, "--command", "sleep 300", env=env)
    assert proc.returncode == 0, proc.stderr
    doc = ws.mam_json("stop", "t1", env=env)
    assert (doc["backend"], doc["server"], doc["status"]) == ("tmux", server, "stopped")
    assert tmux.run(server, "has-session", "-t", "=t1", check=False).returncode != 0
    assert ws.mam_json("forget", "t1", env=env)["removed"][0]["backend"] == "tmux"


def test_a_name_on_two_backends_asks_for_the_backend(ws: Workspace) -> None:
    ws.write_registry(ROWS + '- {"name": "old", "backend": "tmux", "server": "s", "status": "stopped"}\n')
    for args in (["stop", "old"], ["forget", "old"]):
        proc = ws.mam(*args)
        assert proc.returncode == 2, proc.stderr
        assert "old is registered on several servers (herdr server s, tmux server s)" in proc.stderr
        assert proc.stderr.splitlines()[1] == "hint: pass --backend NAME"  # the server is the same
    assert ws.mam_json("--backend", "tmux", "forget", "old")["removed"][0]["backend"] == "tmux"


def test_prune_and_spawn_quote_a_huge_or_hostile_word_briefly(ws: Workspace) -> None:
    ws.write_registry(ROWS)
    for args in (("prune", "--status", "x" * 100_000 + "\x1b[2J"), ("spawn", "a", "--agent", "\x1b]2;t\x07" * 20_000)):
        proc = ws.mam(*args)
        assert proc.returncode == 2 and len(proc.stderr) < 1000 and "\x1b" not in proc.stderr, proc.stderr[:300]


def test_a_hand_edited_status_a_typo_away_from_mams_is_refused_with_its_line(ws: Workspace) -> None:
    """`status: runing` made a live agent inactive to every command, silently (prune would remove its row)."""
    text = ROWS.replace('"name": "live", "backend": "herdr", "server": "s", "status": "running"',
                        '"name": "live", "backend": "herdr", "server": "s", "status": "runing"')
    for typo, meant in (("runing", "running"), ("Running", "running"), ("termnated", "terminated")):
        ws.write_registry(text.replace('"runing"', f'"{typo}"'))
        before = ws.registry.read_bytes()
        for argv in (["status"], ["prune", "--dry-run"], ["reconcile", "--apply"]):
            proc = ws.mam(*argv)
            assert proc.returncode == 2, (argv, proc.stderr)
            assert proc.stderr.splitlines()[0] == (
                f"mam: {ws.registry}:5: status '{typo}' is not one of mam's (starting, running, stopped, "
                f"terminated): did you mean `{meant}`?"), proc.stderr
        assert ws.registry.read_bytes() == before
    # A word of a hand edit that is no typo of mam's is kept, as docs/registry.md promises.
    for word in ("parked", "restarting", "archived"):
        ws.write_registry(text.replace('"runing"', f'"{word}"'))
        assert word in {s["status"] for s in ws.mam_json("status", "--no-state")["sessions"]}
