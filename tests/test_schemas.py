"""Every `--json` document mam prints, checked against the JSON Schema it ships in mam/schemas/.

Each command runs for real (`python3 -m mam ... --json` in a private workspace: the fake herdr, real tmux on
private sockets), and its output must validate. The schemas are strict: every field the code always emits is
`required` and closed documents refuse unknown fields, so `assert_strict` also checks that dropping any field
of a real document, or adding one, makes it invalid: a renamed or undocumented field fails here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

import mam
from conftest import Tmux, Workspace

SCHEMAS = Path(mam.__file__).resolve().parent / "schemas"
# The schema of each command's --json document (forget and prune share one).
COMMAND_SCHEMAS = {
    "status": "status.json", "reconcile": "reconcile.json", "ls": "ls.json", "bootstrap": "bootstrap.json",
    "spawn": "spawn.json", "stop": "stop.json", "forget": "forget.json", "prune": "forget.json",
    "backends": "backends.json", "env": "env.json", "version": "version.json", "shim install": "shim-install.json",
    "skills install": "skills-install.json", "hooks install": "hooks.json", "hooks uninstall": "hooks.json",
    "hooks status": "hooks.json",
    "demo": "demo.json", "restore": "restore.json", "wait": "wait.json", "send": "send.json", "kinds": "kinds.json",
    "wait NAME NAME...": "wait-many.json",  # wait on several agents (test_wait_on_several_and_send_on_herdr)
    "peek": "peek.json", "stop --all": "stop-all.json", "watch": "watch.json",
    "worktree remove": "worktree-remove.json", "worktree list": "worktree-list.json",
    "worktree prune": "worktree-prune.json",  # on real git: tests/test_worktrees.py
    "audit": "audit.json",  # with every action's line: tests/test_audit.py
}
SHARED = {"common.json", "error.json"}  # parts every document uses, and the error document of every command

HERDR_REGISTRY = """\
version: 1
sessions:
  - {name: alive-1, server: live, status: running, agent: claude}
  - {name: ghost, server: live, status: starting}
  - {name: back, server: live, status: stopped}
  - {name: far, server: gone, status: running, created_at: "2020-01-01T00:00:00Z"}
  - {name: unsure, server: flaky, status: running}
herdr_sessions:
  - {name: old, herdr_session: gone, status: terminated, terminated_at: "2020-01-01T00:00:00Z"}
"""
HERDR_AGENTS = [
    {"agent": "claude", "agent_status": "working", "cwd": "/repo", "name": "alive-1", "pane_id": "w1:p1"},
    {"agent": "codex", "agent_session": {"agent": "codex", "kind": "id", "source": "herdr:codex", "value": "s-1"},
     "agent_status": "idle", "cwd": "/repo", "name": "back", "pane_id": "w1:p2"},
    {"agent": "gemini", "agent_status": "done", "cwd": "/tmp", "name": "stray", "pane_id": "w1:p3"},
    {"agent": "codex", "agent_status": "blocked", "pane_id": "w1:p4"},  # unnamed
]


@cache
def _registry() -> Registry:
    """Every schema under its file name, so that `common.json#/...` and `status.json` resolve as they do
    for a tool that reads the files from mam/schemas/."""
    return Registry().with_resources(
        (path.name, Resource.from_contents(json.loads(path.read_text()))) for path in SCHEMAS.glob("*.json"))


def validator(name: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / name).read_text())
    return jsonschema.Draft202012Validator(schema, registry=_registry())


def _objects(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    if isinstance(doc, dict):
        yield path, doc
        for key, value in doc.items():
            yield from _objects(value, (*path, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from _objects(value, (*path, index))


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def assert_strict(name: str, doc: dict[str, Any]) -> None:
    """`doc` is valid, and stops being valid when any of its objects loses a field or gains one."""
    check = validator(name)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in check.iter_errors(doc)]
    assert not errors, f"{name}: {errors}"
    for path, obj in list(_objects(doc)):
        for key in list(obj):
            broken = json.loads(json.dumps(doc))
            del _at(broken, path)[key]
            assert not check.is_valid(broken), f"{name} still accepts {'/'.join(map(str, path))} without {key!r}"
        broken = json.loads(json.dumps(doc))
        _at(broken, path)["an_undocumented_field"] = None
        assert not check.is_valid(broken), f"{name} accepts an unknown field in {'/'.join(map(str, path)) or '/'}"


def run(ws: Workspace, *args: str, expect: int = 0, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = ws.mam(*args, env=env)
    assert proc.returncode == expect, (args, proc.returncode, proc.stdout, proc.stderr)
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def checked(ws: Workspace, command: str, *args: str, expect: int = 0,
            env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `mam COMMAND ARGS --json` and check its document against the command's schema."""
    doc = run(ws, *command.split(), *args, "--json", expect=expect, env=env)
    assert_strict(COMMAND_SCHEMAS[command], doc)
    return doc


def without_binaries(ws: Workspace) -> dict[str, str]:
    """The workspace's environment with no herdr, tmux or zellij on PATH (mam itself runs by its path)."""
    return {**ws.env, "PATH": str(ws.root / "empty-bin")}


# The schemas themselves.

def test_every_schema_is_a_valid_draft_2020_12_schema() -> None:
    files = sorted(p.name for p in SCHEMAS.glob("*.json"))
    assert set(files) == set(COMMAND_SCHEMAS.values()) | SHARED, "a schema no test checks, or a missing one"
    for name in files:
        schema = json.loads((SCHEMAS / name).read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", name
        jsonschema.Draft202012Validator.check_schema(schema)


def test_the_error_schema_names_every_error_code() -> None:
    from mam.util import errors

    codes = json.loads((SCHEMAS / "error.json").read_text())["properties"]["error"]["properties"]["code"]["enum"]
    assert set(codes) == set(errors._EXIT_BY_CODE)


# Commands that need no multiplexer, or the fake herdr.

def test_version(ws: Workspace) -> None:
    assert checked(ws, "version")["version"] == mam.__version__
    assert_strict("version.json", run(ws, "--json", "version"))  # the global --json prints the same document


def test_status_on_an_empty_and_a_full_registry(ws: Workspace) -> None:
    assert checked(ws, "status")["sessions"] == []
    ws.write_registry(HERDR_REGISTRY)
    ws.herdr.start("live")
    ws.herdr.set_agents("live", HERDR_AGENTS)
    ws.herdr.start("flaky")
    ws.herdr.set_fault("flaky", stdout="not json\n", exit=0)
    doc = checked(ws, "status")
    assert {s["state"] for s in doc["servers"]} == {"up", "down", "unknown"}
    assert {s["live"] for s in doc["sessions"]} == {"alive", "absent", "unknown"}
    doc = checked(ws, "status", "--server", "live", "--server", "nobody")  # a --server without rows is listed
    assert [s["server"] for s in doc["servers"]] == ["live", "nobody"]
    assert checked(ws, "status", env={**ws.env, "MAM_BACKEND": "herdr"})["backend"] == "herdr"


def test_status_and_reconcile_print_their_whole_document_when_a_binary_is_missing(ws: Workspace) -> None:
    ws.write_registry(HERDR_REGISTRY)
    doc = checked(ws, "status", expect=3, env=without_binaries(ws))
    assert {s["error"]["kind"] for s in doc["servers"]} == {"not_installed"}
    doc = checked(ws, "reconcile", expect=3, env=without_binaries(ws))
    assert doc["confirmed"] is False and len(doc["unconfirmed"]) == 6


def test_reconcile_every_drift_class_then_apply_and_adopt(ws: Workspace) -> None:
    ws.write_registry(HERDR_REGISTRY)
    ws.herdr.start("live")
    ws.herdr.set_agents("live", HERDR_AGENTS)
    doc = checked(ws, "reconcile")
    assert {(d["class"], d["action"]) for d in doc["drifts"]} == {
        ("A", "mark_terminated"), ("B", "report"), ("C", "mark_running"), ("D", "record_session")}
    assert None in {d["name"] for d in doc["drifts"] if d["class"] == "B"}  # the unnamed agent
    doc = checked(ws, "reconcile", "--apply", "--adopt")
    assert doc["applied"] is True and doc["written"] > 0
    assert "adopt" in {d["action"] for d in doc["drifts"]}
    checked(ws, "reconcile", "--dry-run", "--once", "--emit-diff")


def test_reconcile_watch_prints_one_valid_document_per_line(ws: Workspace) -> None:
    ws.write_registry(HERDR_REGISTRY)
    proc = subprocess.Popen([sys.executable, "-m", "mam", "reconcile", "--watch", "0.1", "--json"], env=ws.env,
                            cwd=ws.root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    for line in lines:
        assert line.endswith("\n") and "\n" not in line[:-1]
        assert_strict("reconcile.json", json.loads(line))


def test_ls_and_bootstrap_on_herdr(ws: Workspace) -> None:
    doc = checked(ws, "ls", "--server", "live")
    assert doc["server"]["state"] == "down" and doc["agents"] == []
    doc = checked(ws, "bootstrap", "--server", "live", env={**ws.env, "CLAUDECODE": "1"})
    assert doc["started"] is True and doc["log"] is not None and "CLAUDECODE" in doc["removed_env"]
    assert checked(ws, "bootstrap", "--server", "live")["started"] is False
    ws.herdr.set_agents("live", HERDR_AGENTS)
    doc = checked(ws, "ls", "--server", "live")
    assert doc["server"]["agents"] == 4 and {a["state"] for a in doc["agents"]} >= {"working", "idle"}
    ws.herdr.set_fault("live", stdout="not json\n", exit=0)
    assert checked(ws, "ls", "--server", "live", expect=1)["server"]["state"] == "unknown"


def test_forget_and_prune(ws: Workspace) -> None:
    ws.write_registry(HERDR_REGISTRY)
    assert checked(ws, "forget", "back", "--dry-run")["dry_run"] is True
    assert [e["name"] for e in checked(ws, "forget", "back", "--server", "live")["removed"]] == ["back"]
    assert checked(ws, "forget", "alive-1", "--force")["removed"][0]["status"] == "running"
    assert checked(ws, "prune", "--dry-run", "--older-than", "1")["removed"][0]["name"] == "old"
    assert [e["name"] for e in checked(ws, "prune")["removed"]] == ["old"]
    assert checked(ws, "prune")["removed"] == []


def test_backends_with_a_plugin_that_fails_to_load(ws: Workspace, tmp_path: Path) -> None:
    assert {b["name"] for b in checked(ws, "backends")["backends"]} >= {"herdr", "tmux", "zellij"}
    env = broken_plugin_env(ws, tmp_path)
    doc = checked(ws, "backends", env={**env, "MAM_DISABLE_PLUGINS": "nosuch"})
    assert {b["name"] for b in doc["backends"] if b["error"]} == {"broken", "MAM_DISABLE_PLUGINS"}


def test_the_backends_schema_names_every_operation() -> None:
    from mam.plugin.records import LOOKED_FOR, OPERATIONS

    schema = json.loads((SCHEMAS / "backends.json").read_text())
    assert schema["$defs"]["operation"]["enum"] == [*OPERATIONS, *LOOKED_FOR]


def test_env_with_removed_and_kept_variables(ws: Workspace) -> None:
    ws.write_config("env:\n  scrub: [ACME_*]\n  keep: [CLAUDE_CODE_ENTRYPOINT, CLAUDE_CODE_MAX_OUTPUT_TOKENS]\n")
    doc = checked(ws, "env", env={**ws.env, "CLAUDECODE": "1", "ACME_TOKEN": "x", "CLAUDE_CODE_ENTRYPOINT": "cli",
                                  "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "9"})
    assert {d["name"] for d in doc["removed"]} == {"CLAUDECODE", "ACME_TOKEN", "CLAUDE_CODE_ENTRYPOINT"}
    assert [d["name"] for d in doc["kept"]] == ["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]
    # a marker the workspace's keep named, and may not keep
    assert [d["not_kept_by"] for d in doc["removed"] if d["not_kept_by"]] == ["CLAUDE_CODE_ENTRYPOINT"]


def test_kinds_shipped_and_with_a_workspace_file(ws: Workspace) -> None:
    doc = checked(ws, "kinds")
    assert doc["states_file"] is None
    claude = next(k for k in doc["kinds"] if k["name"] == "claude")
    assert claude["programs"] == ["claude"] and claude["resume"] == ["{args}", "--resume", "{session}"]
    assert [r["state"] for r in claude["rules"]] == sorted((r["state"] for r in claude["rules"]),
                                                          key=["blocked", "working", "idle"].index)
    (ws.root / ".mam").mkdir(exist_ok=True)
    (ws.root / ".mam" / "states.yaml").write_text("schema: 1\nkinds:\n  mybot:\n    programs: [mybot]\n")
    doc = checked(ws, "kinds")
    assert doc["states_file"] == str(ws.root / ".mam" / "states.yaml")
    assert {"name": "mybot", "programs": ["mybot"], "session_options": [], "resume": None, "new_session": None,
            "rules": []} in doc["kinds"]


def test_skills_install(ws: Workspace, tmp_path: Path) -> None:
    doc = checked(ws, "skills install", "--dest", str(tmp_path / "skills"))
    assert doc["dest"] == str(tmp_path / "skills") and len(doc["skills"]) == 3


def test_hooks_install_status_uninstall(ws: Workspace) -> None:
    claude = Path(ws.env["HOME"]) / ".claude"
    claude.mkdir()
    (claude / "settings.json").write_text('{"model": "opus"}\n')
    assert checked(ws, "hooks install", "--dry-run")["hooks"][0]["action"] == "would install"
    assert [h["action"] for h in checked(ws, "hooks install")["hooks"]] == ["installed", "skipped", "skipped",
                                                                          "skipped"]
    status = checked(ws, "hooks status")["hooks"]
    assert status[0]["state"] == "installed"
    assert status[2]["file"].endswith("hooks.json") and status[2]["details"]["feature"] == "default"
    (claude / "settings.json").write_text("{not json")
    assert checked(ws, "hooks uninstall", "--agent", "claude", expect=1)["hooks"][0]["action"] == "refused"


def test_shim_install(ws: Workspace, tmp_path: Path) -> None:
    assert len(checked(ws, "shim install")["shims"]) == 3
    assert checked(ws, "shim install", "--dir", str(tmp_path / "bin"))["dir"] == str(tmp_path / "bin")


# The error document, for each error code a user can meet.

def broken_plugin_env(ws: Workspace, tmp_path: Path) -> dict[str, str]:
    """A `broken` backend plugin whose import fails, declared by a hand-made dist-info."""
    site = tmp_path / "site"
    (site / "mam_schema_broken-1.0.dist-info").mkdir(parents=True)
    (site / "mam_schema_broken.py").write_text("import nonexistent_module_of_a_broken_plugin\n")
    (site / "mam_schema_broken-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mam-schema-broken\nVersion: 1.0\n")
    (site / "mam_schema_broken-1.0.dist-info" / "entry_points.txt").write_text(
        "[mam.backends]\nbroken = mam_schema_broken\n")
    # the mam under test stays importable (a worktree's own, when PYTHONPATH names it)
    return {**ws.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), ws.env.get("PYTHONPATH")]))}


def error_cases(ws: Workspace, tmp_path: Path) -> list[tuple[str, int, list[str], dict[str, str] | None]]:
    afile = tmp_path / "afile"
    afile.write_text("")
    return [
        ("usage", 2, ["nosuchcommand"], None),
        ("usage", 2, ["reconcile", "--apply", "--dry-run"], None),
        ("usage", 2, ["status", "--bogus"], None),
        ("invalid_name", 2, ["ls", "--server", "-L"], None),
        ("invalid_workspace", 2, ["--workspace", str(afile), "status"], None),
        ("backend_not_found", 3, ["--backend", "nosuch", "status"], None),
        ("backend_unavailable", 3, ["ls", "--server", "s1"], without_binaries(ws)),
        ("plugin_load_failed", 4, ["--backend", "broken", "status"], broken_plugin_env(ws, tmp_path)),
        ("operation_failed", 1, ["forget", "nobody"], None),
    ]


def test_every_error_is_the_error_document(ws: Workspace, tmp_path: Path) -> None:
    for code, exit_code, args, env in error_cases(ws, tmp_path):
        for where in ("after", "before"):  # `mam CMD ... --json` and the global `mam --json CMD ...`
            argv = [*args, "--json"] if where == "after" else ["--json", *args]
            doc = run(ws, *argv, expect=exit_code, env=env)
            assert_strict("error.json", doc)
            assert doc["error"]["code"] == code, (argv, doc)


def test_a_bad_registry_or_config_is_the_error_document(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: a, server: s1}\n  - {name: a, server: s1}\n")
    doc = run(ws, "status", "--json", expect=2)
    assert_strict("error.json", doc)
    assert doc["error"]["code"] == "invalid_registry" and ":3:" in doc["error"]["message"]
    ws.registry.unlink()
    ws.write_config("backend: herdr\nscrubs: [X]\n")
    doc = run(ws, "env", "--json", expect=2)
    assert_strict("error.json", doc)
    assert doc["error"]["code"] == "invalid_config" and ":2:" in doc["error"]["message"]


# Real tmux: spawn, stop, ls, bootstrap, reconcile and the demo.

def test_the_lifecycle_on_tmux(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    doc = checked(ws, "bootstrap", "--server", server)
    assert doc["started"] is True and isinstance(doc["pid"], int | None)
    assert checked(ws, "ls", "--server", server)["agents"] == []
    doc = checked(ws, "spawn", "agent-1", "--server", server, "--command", "sleep 600", "--cwd", str(ws.root))
    assert doc["session"]["pane_id"]
    checked(ws, "spawn", "agent-2", "--server", server, "--command", "sleep 600")
    tmux.agent(server, "stray")
    assert [a["name"] for a in checked(ws, "ls", "--server", server)["agents"]] == ["agent-1", "agent-2", "stray"]
    tmux.run(server, "kill-session", "-t", "=agent-2")
    doc = checked(ws, "reconcile")
    assert {d["class"] for d in doc["drifts"]} == {"A", "B"}
    checked(ws, "reconcile", "--apply")
    assert checked(ws, "stop", "agent-1")["status"] == "stopped"
    doc = checked(ws, "stop", "stray", "--server", server, "--force")  # not registered
    assert doc["registered"] is False and doc["status"] == "stopped"
    assert checked(ws, "stop", "agent-1")["status"] == "stopped"  # already recorded as gone
    assert checked(ws, "status")["backend"] == "tmux"


def test_demo(ws: Workspace, tmux: Tmux) -> None:
    env = {k: v for k, v in ws.env.items() if not k.startswith("MAM_")}
    doc = checked(ws, "demo", env=env)
    assert [s["command"].split()[0] for s in doc["steps"]] == ["spawn", "spawn", "status", "reconcile",
                                                               "reconcile", "status", "restore", "status"]


def test_restore_plan_outcome_and_reconcile_restore_on_tmux(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    checked(ws, "spawn", "keep-1", "--server", server, "--command", "sleep 600", "--cwd", str(ws.root))
    checked(ws, "spawn", "keep-2", "--server", server, "--command", "sleep 600", "--cwd", str(ws.root))
    tmux.run(server, "kill-server")
    with ws.registry.open("a") as registry_file:  # one the plan cannot start, and one it cannot ask
        registry_file.write("- " + json.dumps({"name": "no-spec", "backend": "tmux", "server": server,
                                               "status": "terminated"}) + "\n")
        registry_file.write("- " + json.dumps({"name": "far", "backend": "herdr", "server": "flaky",
                                               "status": "running"}) + "\n")
    ws.herdr.set_fault("flaky", stderr="boom", exit=1)
    plan = checked(ws, "restore", "--all", "--dry-run", env={**ws.env, "MAM_BACKEND": ""})
    assert {a["name"]: a["outcome"] for a in plan["agents"]} == {
        "keep-1": "would_restore", "keep-2": "would_restore", "no-spec": "skipped", "far": "skipped"}
    assert {a["name"]: a["reason"] for a in plan["agents"]}["no-spec"] == "no_spec"
    assert checked(ws, "restore", "no-spec", expect=1)["agents"][0]["outcome"] == "failed"
    doc = checked(ws, "restore", "keep-1")
    assert doc["agents"][0]["outcome"] == "restored" and doc["agents"][0]["pane_id"]
    assert checked(ws, "restore", "keep-1")["agents"][0]["outcome"] == "running"
    doc = checked(ws, "reconcile", "--apply", "--restore")
    assert {a["name"]: a["outcome"] for a in doc["restore"]["agents"]} == {"keep-2": "restored", "no-spec": "skipped"}


def test_wait_on_several_and_send_on_herdr(ws: Workspace) -> None:
    ws.write_registry(HERDR_REGISTRY)
    ws.herdr.start("live")
    ws.herdr.set_agents("live", HERDR_AGENTS)
    for args, expect in ((("--until", "working,idle"), 0), (("--until", "idle", "--any"), 0),
                         (("--until", "blocked", "--timeout", "0.5"), 1)):
        doc = run(ws, "wait", "alive-1", "back", *args, "--json", expect=expect)
        assert_strict("wait-many.json", doc)
    doc = checked(ws, "send", "back", "one\ttwo", "--enter", "--confirm", "0.5", expect=1)
    assert doc["delivered"] is False and doc["state_after"] == "idle"
    assert checked(ws, "send", "alive-1", "more")["delivered"] is None


def test_audit_of_a_refused_and_a_done_action(ws: Workspace) -> None:
    """`mam audit --json` after a forget (done) and a stop of an unknown agent (refused), with a foreign line."""
    ws.write_registry("version: 1\nsessions:\n  - {name: gone, server: s, status: stopped, backend: herdr}\n")
    run(ws, "forget", "gone", "--json")
    run(ws, "stop", "nobody", "--server", "s", "--json", expect=1)
    with (ws.root / ".mam" / "audit.jsonl").open("a") as handle:
        handle.write("not json\n")
    doc = run(ws, "audit", "--json")
    assert validator("audit.json").is_valid(doc)
    assert [(e["action"], e["result"]) for e in doc["entries"]] == [("forget", "ok"), ("stop", "refused")]
    assert doc["skipped"] == 1
    # Strict but for `arguments`, each command's own (an open object): every field required, no other taken.
    check = validator("audit.json")
    for where in (doc, doc["entries"][0]):
        for key in list(where):
            value = where.pop(key)
            assert not check.is_valid(doc), f"audit.json still accepts a document without {key!r}"
            where[key] = value
        where["an_undocumented_field"] = None
        assert not check.is_valid(doc)
        del where["an_undocumented_field"]
    assert check.is_valid(doc)


def test_docs_json_describes_every_schema() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "json.md").read_text()
    for name in sorted(set(COMMAND_SCHEMAS.values()) | SHARED):
        assert f"mam/schemas/{name}" in text, f"docs/json.md does not mention mam/schemas/{name}"



def test_watch_changes_status_watch_lines_and_stop_all(ws: Workspace, tmux: Tmux) -> None:
    """`watch --json` (one change per line: the stand-in turns blocked when `go` is typed), `status --watch
    --json` (one status document per line), `stop --all --json`."""
    standin = str(Path(__file__).parent / "agents" / "standin.py")
    server = tmux.name()
    proc = ws.mam("spawn", "turner", "--agent", "claude", "--server", server, "--command", sys.executable, "--",
                  standin, "claude", "working", "--then", "blocked", "--when-typed", "go")
    assert proc.returncode == 0, proc.stderr
    watcher = subprocess.Popen([sys.executable, "-m", "mam", "watch", "--interval", "0.2", "--on", "working,blocked",
                                "--json"], env=ws.env, cwd=ws.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True)
    assert watcher.stdout is not None and watcher.stderr is not None
    try:
        assert watcher.stderr.readline().startswith("mam: watching")
        assert ws.mam("send", "turner", "go", "--enter").returncode == 0
        line = watcher.stdout.readline()
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.communicate(timeout=30)
    assert line.endswith("\n") and "\n" not in line[:-1]
    change = json.loads(line)
    assert change["to"] == "blocked"
    assert_strict("watch.json", change)
    lines = subprocess.Popen([sys.executable, "-m", "mam", "status", "--watch", "0.1", "--json"], env=ws.env,
                             cwd=ws.root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, text=True)
    try:
        assert lines.stdout is not None
        docs = [lines.stdout.readline() for _ in range(2)]
    finally:
        lines.send_signal(signal.SIGINT)
        lines.communicate(timeout=30)
    for doc in docs:
        assert doc.endswith("\n") and "\n" not in doc[:-1]
        assert_strict("status.json", json.loads(doc))
    doc = checked(ws, "stop --all", "--yes")
    assert [a["outcome"] for a in doc["agents"]] == ["stopped"]
    assert_strict("stop-all.json", checked(ws, "stop --all", "--yes"))  # nothing left: an empty list


def test_status_wait_and_send_with_agent_state(ws: Workspace, tmux: Tmux) -> None:
    standin = str(Path(__file__).parent / "agents" / "standin.py")
    proc = ws.mam("spawn", "asker", "--agent", "codex", "--server", tmux.name(), "--command", sys.executable, "--",
                  standin, "codex", "blocked")
    assert proc.returncode == 0, proc.stderr
    doc = checked(ws, "wait", "asker", "--until", "blocked")
    assert doc["session"]["state"] == "blocked" and doc["session"]["evidence"]["rule"]
    assert_strict("status.json", run(ws, "status", "--state", "blocked", "--json"))
    checked(ws, "send", "asker", "--answer", "y", "--enter")  # a blocked agent takes an answer, not a prompt
    assert checked(ws, "peek", "asker", "--lines", "5")["lines"]
    assert checked(ws, "wait", "asker", "--until", "working", "--timeout", "0.5", expect=1)["reached"] is False
    ws.write_registry(HERDR_REGISTRY)
    ws.herdr.start("live")
    ws.herdr.set_agents("live", HERDR_AGENTS)
    doc = checked(ws, "status", env={**ws.env, "MAM_BACKEND": "herdr"})
    assert {s["state_source"] for s in doc["sessions"]} == {"backend", "none"}
