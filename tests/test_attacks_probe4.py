"""A fourth attacker's probe (issue 20, "Done when"): what a cloned workspace may make a signed spec run."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from conftest import Tmux, Workspace, ZellijKit

pytestmark = [pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"), pytest.mark.tmux]


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 20
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_workspace_states_file_cannot_put_words_into_a_signed_resume(ws: Workspace, tmux: Tmux,
                                                                      tmp_path: Path) -> None:
    # A `claude` that writes down the argv it got each time it starts.
    bin_dir, log = tmp_path / "bin", tmp_path / "argv"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec sleep 600\n')
    fake.chmod(0o755)
    ws.env["PATH"] = os.pathsep.join([str(bin_dir), ws.env["PATH"]])
    server, work = tmux.name(), tmp_path / "work"
    work.mkdir()
    proc = ws.mam("spawn", "--json", "victim", "--server", server, "--agent", "claude", "--cwd", str(work))
    assert proc.returncode == 0, proc.stderr
    _wait_for(log)
    log.unlink()
    row = yaml.safe_load(ws.registry.read_text())["sessions"][0]
    assert row["agent_session"] and row["spec_sig"]
    tmux.run(server, "kill-server")
    # What a clone (or a teammate's commit) may bring: a resume template with words of its own. Claude's
    # `--mcp-config` or `--settings` (hooks) run any program; this stands for them.
    states = ws.registry.parent / "states.yaml"
    states.write_text("schema: 1\nkinds:\n  claude:\n    resume: ['--planted-option', '--resume', '{session}']\n")
    doc = ws.mam_json("restore", "--all", expect=1)
    entry = doc["agents"][0]
    assert entry["outcome"] == "untrusted" and entry["spec_trust"] != "signed", entry
    assert "--planted-option" in entry["argv"]  # shown, for the user to read before consenting
    assert "states.yaml" in entry["message"]
    time.sleep(1)
    assert not log.exists() or "--planted-option" not in log.read_text()


# Variation selectors carry hidden bytes as tag characters do (256 of them: one byte each, after any visible
# character); the combining grapheme joiner, the Khmer inherent vowels and the braille blank draw nothing.
SMUGGLED = "\ufe00\ufe0f\U000e0100\U000e01ef\u034f\u17b4\u17b5\u2800"


def test_variation_selectors_and_other_blanks_are_written_out_in_a_listing(ws: Workspace) -> None:
    ws.write_registry("version: 1\nsessions:\n  - {name: a, server: live, status: running, agent: claude}\n")
    ws.herdr.start("live")
    ws.herdr.set_agents("live", [{"agent": "claude", "agent_status": "working", "cwd": f"/repo/x{SMUGGLED}y",
                                  "name": "a", "pane_id": "w1:p1", "terminal_id": "term_1"}])
    for args in (("ls", "--server", "live"), ("status",)):
        proc = ws.mam(*args)
        assert proc.returncode == 0, proc.stderr
        assert not any(ch in proc.stdout + proc.stderr for ch in SMUGGLED), (args, ascii(proc.stdout))
    listing = ws.mam("ls", "--server", "live").stdout
    for escape in ("\\ufe00", "\\ufe0f", "\\U000e0100", "\\U000e01ef", "\\u034f", "\\u17b4", "\\u2800"):
        assert escape in listing, (escape, listing)


def test_a_state_verdict_quotes_no_variation_selector() -> None:
    from mam.kinds.classify import classify_screen
    from mam.kinds.library import load_library

    verdict = classify_screen(load_library(None), None, f"Do you want to proceed?{SMUGGLED} (y/n)\n")
    assert verdict.state == "blocked" and verdict.line is not None, verdict
    assert "proceed" in verdict.line and not any(ch in verdict.line for ch in SMUGGLED), ascii(verdict.line)


def test_a_zellij_agent_named_after_its_program_is_seen_alive(ws: Workspace, zj: ZellijKit) -> None:
    # `mam spawn claude --agent claude` on zellij: the pane is titled `claude`, its command `claude --session-id
    # ...`. It was taken for a pane zellij titled after its program: spawn said it failed, the row was
    # terminated and the agent ran on, out of mam's reach.
    proc = ws.mam("spawn", "sleep", "--json", "--server", "work", "--cwd", str(ws.root), "--command", "sleep 600")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    sessions = ws.mam_json("status")["sessions"]
    assert [(s["name"], s["live"]) for s in sessions] == [("sleep", "alive")], sessions
    assert ws.mam_json("reconcile")["drifts"] == []
    # One named exactly as its whole command line cannot be told from an unnamed pane: refused, nothing started.
    proc = ws.mam("spawn", "top", "--json", "--server", "work", "--cwd", str(ws.root), "--command", "top")
    assert proc.returncode != 0 and "named exactly as its command line" in proc.stderr, proc.stderr
    assert not [p for p in zj.terminals("work") if p["title"] == "top"]
