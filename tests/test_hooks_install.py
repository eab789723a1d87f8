"""`mam hooks install|uninstall|status` on each kind's own settings file, with a user's own hooks already in it,
and `mam report` as a hook runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import Workspace

# A user's own settings, written by hand (their indentation, their key order, their own hooks).
CLAUDE = """{
    "model": "opus",
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send 'Claude is done'"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/guard.sh"}]}]
    },
    "permissions": {"allow": ["Bash(ls:*)"]}
}
"""
GEMINI = """{
  "theme": "GitHub",
  "hooks": {
    "AfterAgent": [
      {"matcher": "*", "hooks": [{"name": "chime", "type": "command", "command": "paplay done.oga"}]}
    ]
  }
}
"""
CODEX = """# my codex settings
model = "gpt-5-codex"

[tui]
notifications = true

[projects."/work"]
trust_level = "trusted"
"""
FILES = {"claude": (".claude/settings.json", CLAUDE), "gemini": (".gemini/settings.json", GEMINI),
         "codex": (".codex/config.toml", CODEX)}


def settings(ws: Workspace, kind: str) -> Path:
    return Path(ws.env["HOME"]) / FILES[kind][0]


def write_user_file(ws: Workspace, kind: str) -> Path:
    path = settings(ws, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(FILES[kind][1])
    return path


def mam_commands(kind: str, text: str) -> list[str]:
    """The commands of mam's entries in a settings file, as the agent would read them."""
    if kind == "codex":
        notify = tomllib.loads(text).get("notify")
        return [" ".join(notify)] if notify else []
    data = json.loads(text)
    return [h["command"] for groups in data.get("hooks", {}).values() for g in groups for h in g["hooks"]
            if h["command"].startswith("mam report ")]


@pytest.mark.parametrize("kind", ["claude", "gemini", "codex"])
def test_install_then_uninstall_leaves_the_file_byte_for_byte(ws: Workspace, kind: str) -> None:
    path = write_user_file(ws, kind)
    before = path.read_bytes()
    proc = ws.mam("hooks", "install", "--agent", kind)
    assert proc.returncode == 0, proc.stderr
    after = path.read_text()
    assert mam_commands(kind, after), "no `mam report` entry was added"
    # The user's own entries are all still there.
    if kind == "codex":
        assert tomllib.loads(after)["projects"] == {"/work": {"trust_level": "trusted"}}
        assert tomllib.loads(after)["notify"] == ["mam", "report", "idle"]
    else:
        own = json.loads(FILES[kind][1])
        data = json.loads(after)
        assert {k: v for k, v in data.items() if k != "hooks"} == {k: v for k, v in own.items() if k != "hooks"}
        for event, groups in own["hooks"].items():
            assert data["hooks"][event][:len(groups)] == groups
    assert (path.parent / (path.name + ".mam-backup")).read_bytes() == before
    status = ws.mam_json("hooks", "status", "--agent", kind)["hooks"][0]
    assert status["state"] == "installed"
    # A second install changes nothing.
    again = ws.mam("hooks", "install", "--agent", kind)
    assert again.returncode == 0 and path.read_text() == after and "already" in again.stdout
    proc = ws.mam("hooks", "uninstall", "--agent", kind)
    assert proc.returncode == 0, proc.stderr
    assert path.read_bytes() == before
    assert ws.mam_json("hooks", "status", "--agent", kind)["hooks"][0]["state"] == "absent"


@pytest.mark.parametrize("kind", ["claude", "gemini"])
def test_install_keeps_the_users_lines_as_they_were(ws: Workspace, kind: str) -> None:
    """Issue 33, 16: install rewrote a user's one-line group into eight lines. Each line of the user's file is in
    the installed file as it was, up to where mam's groups follow the user's (laid out like them), and JSON still
    holds exactly the user's settings beside mam's groups."""
    path = write_user_file(ws, kind)
    proc = ws.mam("hooks", "install", "--agent", kind)
    assert proc.returncode == 0, proc.stderr
    installed = path.read_text()
    for line in FILES[kind][1].splitlines():
        # as it was, but where mam's items follow: after the user's last group of a list, or the last member
        assert line.rstrip(",").removesuffix("]") in installed, (line, installed)
    assert len(mam_commands(kind, installed)) >= 3
    user = json.loads(FILES[kind][1])
    assert {k: v for k, v in json.loads(installed).items() if k != "hooks"} == {
        k: v for k, v in user.items() if k != "hooks"}


def test_a_one_line_file_stays_one_line(ws: Workspace) -> None:
    path = settings(ws, "claude")
    path.parent.mkdir(parents=True)
    one = '{"model": "opus", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "chime"}]}]}}\n'
    path.write_text(one)
    assert ws.mam("hooks", "install", "--agent", "claude").returncode == 0
    installed = path.read_text()
    assert installed.count("\n") == 1 and installed.startswith(one[:-4])
    assert ws.mam("hooks", "uninstall", "--agent", "claude").returncode == 0
    assert path.read_text() == one


@pytest.mark.parametrize("kind", ["claude", "gemini"])
def test_install_only_inserts_every_byte_of_the_users_file_stays(ws: Workspace, kind: str) -> None:
    """Issue 33, 16, to the byte: the installed file is the user's text with mam's text inserted into it, nothing
    of theirs deleted or replaced (a one-line group stays one line, their spacing, CRLF line ends included), and
    what mam inserted is exactly its groups; uninstall gives the bytes back."""
    import difflib

    path = settings(ws, kind)
    path.parent.mkdir(parents=True)
    own = FILES[kind][1].replace("\n", "\r\n")
    path.write_bytes(own.encode())
    assert ws.mam("hooks", "install", "--agent", kind).returncode == 0
    installed = path.read_bytes().decode()
    ops = difflib.SequenceMatcher(None, own, installed, autojunk=False).get_opcodes()
    assert {op for op, *_ in ops} == {"equal", "insert"}, [o for o in ops if o[0] != "equal"]
    chunks = [installed[j1:j2] for op, _, _, j1, j2 in ops if op == "insert"]
    # each insertion is mam's groups: a re-layout would insert line ends and spaces between the user's bytes
    assert all("mam report" in chunk for chunk in chunks), [c for c in chunks if "mam report" not in c]
    inserted = "".join(chunks)
    assert inserted.count("mam report") == len(mam_commands(kind, installed)) == 5
    assert "\r\n" in inserted and "\n" not in inserted.replace("\r\n", "")  # the file's own line ends
    assert ws.mam("hooks", "uninstall", "--agent", kind).returncode == 0
    assert path.read_bytes() == own.encode()


@pytest.mark.parametrize("kind", ["claude", "gemini", "codex"])
def test_install_where_there_was_no_file_and_uninstall_removes_it(ws: Workspace, kind: str) -> None:
    path = settings(ws, kind)
    assert ws.mam("hooks", "install", "--agent", kind).returncode == 0
    assert mam_commands(kind, path.read_text())
    assert ws.mam("hooks", "uninstall", "--agent", kind).returncode == 0
    assert not path.exists()


def test_uninstall_keeps_what_the_user_added_after_the_install(ws: Workspace) -> None:
    path = write_user_file(ws, "claude")
    assert ws.mam("hooks", "install", "--agent", "claude").returncode == 0
    data = json.loads(path.read_text())
    data["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "echo later"}]})
    data["env"] = {"FOO": "1"}
    path.write_text(json.dumps(data, indent=4) + "\n")
    assert ws.mam("hooks", "uninstall", "--agent", "claude").returncode == 0
    left = json.loads(path.read_text())
    assert mam_commands("claude", path.read_text()) == []
    assert left["env"] == {"FOO": "1"}
    assert [g["hooks"][0]["command"] for g in left["hooks"]["Stop"]] == ["notify-send 'Claude is done'", "echo later"]
    assert set(left["hooks"]) == {"Stop", "PreToolUse"}


@pytest.mark.parametrize("kind", ["claude", "gemini", "codex"])
def test_a_file_it_cannot_parse_is_left_alone_with_exit_1(ws: Workspace, kind: str) -> None:
    path = settings(ws, kind)
    path.parent.mkdir(parents=True)
    broken = b'{"hooks": {"Stop": [}\n' if kind != "codex" else b'model = "gpt\n[tui\n'
    path.write_bytes(broken)
    for command in ("install", "uninstall"):
        proc = ws.mam("hooks", command, "--agent", kind)
        assert proc.returncode == 1, proc.stdout
        assert "cannot parse" in proc.stdout
        assert path.read_bytes() == broken
    assert not (path.parent / (path.name + ".mam-backup")).exists()
    assert ws.mam_json("hooks", "status", "--agent", kind)["hooks"][0]["state"] == "unreadable"


def test_dry_run_shows_the_diff_and_writes_nothing(ws: Workspace) -> None:
    path = write_user_file(ws, "claude")
    proc = ws.mam("hooks", "install", "--agent", "claude", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert '+                        "command": "mam report blocked"' in proc.stdout
    assert path.read_text() == CLAUDE
    assert not (path.parent / "settings.json.mam-backup").exists()


def test_codex_with_a_notify_of_its_own_is_refused(ws: Workspace) -> None:
    path = settings(ws, "codex")
    path.parent.mkdir(parents=True)
    path.write_text('notify = ["notify-send", "codex"]\n')
    proc = ws.mam("hooks", "install", "--agent", "codex")
    assert proc.returncode == 1 and "notify-send" in proc.stdout
    assert path.read_text() == 'notify = ["notify-send", "codex"]\n'


def test_kinds_without_hooks_and_unknown_kinds_are_bad_input(ws: Workspace) -> None:
    proc = ws.mam("hooks", "install", "--agent", "opencode")
    assert proc.returncode == 2 and "JavaScript plugins" in proc.stderr
    proc = ws.mam("hooks", "install", "--agent", "vim")
    assert proc.returncode == 2 and "claude, codex, gemini" in proc.stderr
    text = ws.mam("hooks", "status").stdout
    assert "aider: no hooks" in text and "claude:" in text


def test_hooks_status_says_its_word_per_kind(ws: Workspace) -> None:
    """installed, partial, absent or unreadable, as docs/cli.md names them, then the file it read."""
    write_user_file(ws, "gemini")
    assert ws.mam("hooks", "install", "--agent", "gemini").returncode == 0
    lines = ws.mam("hooks", "status", "--agent", "claude", "--agent", "gemini").stdout.splitlines()
    assert lines == [f"claude: absent: no settings file ({settings(ws, 'claude')})",
                     f"gemini: installed ({settings(ws, 'gemini')})"]


def test_install_without_agent_skips_agents_not_set_up_here(ws: Workspace) -> None:
    write_user_file(ws, "gemini")
    doc = ws.mam_json("hooks", "install")
    assert {h["agent"]: h["action"] for h in doc["hooks"]} == {"claude": "skipped", "codex": "skipped",
                                                              "gemini": "installed"}
    assert not settings(ws, "claude").exists()


def report(ws: Workspace, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    variables = {k: v for k, v in ws.env.items() if k not in ("MAM_AGENT", "TMUX_PANE")}
    return subprocess.run([sys.executable, "-m", "mam", "report", *args], env={**variables, **env},
                          capture_output=True, text=True, timeout=30, cwd=ws.root)


def test_report_writes_the_agents_file(ws: Workspace) -> None:
    proc = report(ws, "blocked", MAM_AGENT="fixer", TMUX_PANE="%7")
    assert proc.returncode == 0 and proc.stdout == proc.stderr == ""
    data = json.loads((ws.root / ".mam" / "reports" / "fixer.json").read_text())
    assert data["state"] == "blocked" and data["panes"] == {"TMUX_PANE": "%7"} and data["agent"] == "fixer"
    assert os.getpid() in data["pids"]  # the process that ran it is one of its ancestors
    # Codex appends its event as JSON: ignored.
    assert report(ws, "idle", '{"type": "agent-turn-complete"}', MAM_AGENT="fixer").returncode == 0
    assert json.loads((ws.root / ".mam" / "reports" / "fixer.json").read_text())["state"] == "idle"
    assert [p.name for p in (ws.root / ".mam" / "reports").iterdir()] == ["fixer.json"]  # no temporary left


def test_report_outside_an_agent_does_nothing_and_bad_words_never_exit_2(ws: Workspace) -> None:
    proc = report(ws, "idle")
    assert proc.returncode == 0 and not (ws.root / ".mam" / "reports").exists()
    bad = report(ws, "sleeping", MAM_AGENT="fixer")
    assert bad.returncode == 1 and "working, blocked, idle, done" in bad.stderr
    assert report(ws, "idle", MAM_AGENT="../escape").returncode == 1
    assert not (ws.root / ".mam" / "escape.json").exists()
    assert report(ws, "idle", MAM_AGENT="fixer", MAM_WORKSPACE=str(ws.root / "gone")).returncode == 1


@pytest.mark.parametrize("kind", ["claude", "gemini", "codex"])
def test_a_deeply_nested_file_is_unparsable_not_a_traceback(ws: Workspace, kind: str) -> None:
    path = settings(ws, kind)
    path.parent.mkdir(parents=True)
    deep = "[" * 100_000 + "]" * 100_000
    nested = (deep if kind != "codex" else f"x = {deep}\n").encode()
    path.write_bytes(nested)
    for command in ("install", "uninstall"):
        proc = ws.mam("hooks", command, "--agent", kind)
        assert proc.returncode == 1, proc.stderr
        assert "cannot parse" in proc.stdout and "nested deeper" in proc.stdout
        assert "Traceback" not in proc.stderr
        assert path.read_bytes() == nested
    assert ws.mam_json("hooks", "status", "--agent", kind)["hooks"][0]["state"] == "unreadable"


@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_install_keeps_the_files_mode_in_the_file_and_its_backup(ws: Workspace, kind: str) -> None:
    path = write_user_file(ws, kind)
    path.chmod(0o600)
    assert ws.mam("hooks", "install", "--agent", kind).returncode == 0
    backup = path.parent / (path.name + ".mam-backup")
    assert (path.stat().st_mode & 0o777, backup.stat().st_mode & 0o777) == (0o600, 0o600)
    assert ws.mam("hooks", "uninstall", "--agent", kind).returncode == 0
    assert path.stat().st_mode & 0o777 == 0o600


def test_the_backup_never_copies_setuid_or_setgid(ws: Workspace) -> None:
    path = write_user_file(ws, "claude")
    path.chmod(0o6640)
    assert ws.mam("hooks", "install", "--agent", "claude").returncode == 0
    backup = path.parent / (path.name + ".mam-backup")
    assert (path.stat().st_mode & 0o7777, backup.stat().st_mode & 0o7777) == (0o640, 0o640)


@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_a_settings_file_that_is_a_link_is_refused_and_nothing_is_written(ws: Workspace, kind: str) -> None:
    target = Path(ws.env["HOME"]) / "elsewhere"
    target.write_text(FILES[kind][1])
    path = settings(ws, kind)
    path.parent.mkdir(parents=True)
    path.symlink_to(target)
    before = set(path.parent.iterdir())
    for command in ("install", "uninstall"):
        proc = ws.mam("hooks", command, "--agent", kind)
        assert proc.returncode == 1, proc.stdout
        assert "symbolic link" in proc.stdout and "Traceback" not in proc.stderr
        assert path.is_symlink() and target.read_text() == FILES[kind][1]
        # nothing beside the link; Codex's other file (hooks.json) is its own and may be done
        others = {path.parent / "hooks.json"} if kind == "codex" else set()
        assert set(path.parent.iterdir()) - others == before


def test_codex_uninstall_takes_out_only_the_top_level_lines_mam_wrote(ws: Workspace) -> None:
    from mam.hooks.codex import MARK, NOTIFY

    path = settings(ws, "codex")
    path.parent.mkdir(parents=True)
    # The user's own profile runs the same program, with mam's very words (copied from an install).
    own = CODEX + f'\n[profiles.quiet]\n{MARK}\n{NOTIFY}\nmodel = "o3"\n'
    path.write_text(own)
    assert ws.mam("hooks", "install", "--agent", "codex").returncode == 0
    assert tomllib.loads(path.read_text())["notify"] == ["mam", "report", "idle"]
    (path.parent / "config.toml.mam-backup").unlink()  # uninstall works from the file itself, not the backup
    proc = ws.mam("hooks", "uninstall", "--agent", "codex")
    assert proc.returncode == 0, proc.stdout
    assert path.read_text() == own
    assert tomllib.loads(path.read_text())["profiles"]["quiet"]["notify"] == ["mam", "report", "idle"]
    # Without mam's lines at the top, the profile's own is not taken for mam's.
    assert ws.mam_json("hooks", "status", "--agent", "codex")["hooks"][0]["state"] == "absent"
    proc = ws.mam("hooks", "uninstall", "--agent", "codex")
    assert proc.returncode == 0 and path.read_text() == own and "not in it" in proc.stdout


THIS_MAM = Path(sys.executable).parent / "mam"  # the `mam` script installed beside this Python (`pip install -e`)


@pytest.mark.skipif(not THIS_MAM.is_file(), reason="no `mam` script beside this Python (pip install -e . makes it)")
def test_install_warns_when_the_agents_path_finds_another_mam_or_none(ws: Workspace) -> None:
    """Issue 33, 16: the hooks run `mam` from the agent's PATH; an agent started outside mam's virtualenv finds
    another or none, and its reports never come. Install says so, and names --absolute."""
    write_user_file(ws, "claude")
    bare = {**ws.env, "PATH": "/usr/bin:/bin"}
    proc = ws.mam("hooks", "install", "--agent", "claude", env=bare)
    assert proc.returncode == 0, proc.stderr
    assert "warning: the hooks run `mam report`, and `mam` on this PATH is not found" in proc.stderr
    assert str(THIS_MAM) in proc.stderr and "--absolute" in proc.stderr
    ws.mam("hooks", "uninstall", "--agent", "claude", env=bare)
    same = {**ws.env, "PATH": f"{THIS_MAM.parent}:/usr/bin:/bin"}
    proc = ws.mam("hooks", "install", "--agent", "claude", env=same)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


@pytest.mark.skipif(not THIS_MAM.is_file(), reason="no `mam` script beside this Python (pip install -e . makes it)")
@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_absolute_install_runs_this_mam_by_its_path_and_uninstall_finds_it(ws: Workspace, kind: str) -> None:
    path = write_user_file(ws, kind)
    bare = {**ws.env, "PATH": "/usr/bin:/bin"}
    proc = ws.mam("hooks", "install", "--agent", kind, "--absolute", env=bare)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    installed = path.read_text()
    if kind == "codex":
        assert tomllib.loads(installed)["notify"] == [str(THIS_MAM), "report", "idle"]
    else:
        commands = [h["command"] for groups in json.loads(installed)["hooks"].values() for g in groups
                    for h in g["hooks"] if "report" in h["command"]]
        assert commands and all(c.startswith(f"{THIS_MAM} report ") for c in commands), commands
        # as the agent runs it: a shell, with a PATH that has no mam on it
        ran = subprocess.run(["sh", "-c", commands[0].replace(" report ", " report --help #", 1)], env=bare,
                             capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0 and "report" in ran.stdout, ran.stderr
    assert ws.mam("hooks", "status", "--agent", kind, env=bare).stdout.startswith(f"{kind}: installed")
    proc = ws.mam("hooks", "uninstall", "--agent", kind, env=bare)  # no --absolute needed to find them
    assert proc.returncode == 0, proc.stderr
    assert path.read_text() == FILES[kind][1]
