"""`mam demo`: mam's main job, shown on a private tmux server (spawn, drift, reconcile, a dead server and its
agents restored), then everything it made is removed.

The tmux socket lives in a temporary TMUX_TMPDIR and the registry in a temporary workspace, so the demo
never touches the user's tmux servers or registry.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mam.agents.statusview import status_document
from mam.calls import runner
from mam.commands.lifecycle import spawn_document
from mam.commands.reconcile import reconcile_document
from mam.commands.restore import restore_document
from mam.servers.app import App
from mam.util import render
from mam.util.errors import MamError

SERVER = "mam-demo"
AGENTS = ("demo-claude", "demo-codex")


def run_demo(say: Callable[[str], None], record: Callable[[dict[str, Any]], None] = lambda step: None) -> int:
    """Run the demo, telling a person each step with `say` and a program each document with `record`."""
    if shutil.which("tmux") is None:
        raise MamError("backend_unavailable", "mam demo needs tmux", hint="apt-get install -y tmux")
    tmpdir = tempfile.mkdtemp(prefix="mam-demo-", dir="/tmp")  # short: socket paths are limited
    workspace = Path(tmpdir) / "workspace"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAM_", "TMUX"))}
    env.update({"TMUX_TMPDIR": tmpdir, "MAM_TMUX_CONFIG": "/dev/null", "MAM_BOOTSTRAP_TIMEOUT": "10",
                # the launch spec key the demo's spawns make lives and goes with the demo, not in ~/.config
                "XDG_CONFIG_HOME": os.path.join(tmpdir, "config")})
    app = App.open(str(workspace), "tmux", env)
    try:
        say(f"# a private tmux server {SERVER!r} (socket under {tmpdir}) and a scratch workspace\n")
        for name in AGENTS:
            # The first asks a question, as an agent waiting for its permission does: status reads it as
            # blocked (rule generic.proceed). The other draws nothing mam has a rule for: unknown, never guessed.
            question = "; echo Do you want to proceed?" if name == AGENTS[0] else ""
            command = f"sh -c 'echo {name} is a stand-in agent{question}; exec sleep 600'"
            doc = spawn_document(app, name, agent=None, server=SERVER, cwd=str(workspace), command=command, args=[])
            record({"command": f"spawn {name}", "document": doc})
            say(f"$ mam --backend tmux spawn {name} --server {SERVER} --command \"{command}\"")
            say(f"{name}: {doc['session']['status']} in pane {doc['session']['pane_id']}")
        say("\n$ mam --backend tmux status")
        say(render.status_text(_step(record, "status", status_document(app))))
        victim = AGENTS[1]
        say(f"\n# {victim} dies behind mam's back: tmux -L {SERVER} kill-session -t ={victim}")
        runner.run(["tmux", "-L", SERVER, "kill-session", "-t", "=" + victim], timeout=10, env=app.backend_env)
        say("\n$ mam --backend tmux reconcile")
        say(render.reconcile_text(_step(record, "reconcile", reconcile_document(app))))
        say("\n$ mam --backend tmux reconcile --apply")
        say(render.reconcile_text(_step(record, "reconcile --apply", reconcile_document(app, apply=True))))
        say("\n$ mam --backend tmux status")
        say(render.status_text(_step(record, "status", status_document(app))))
        say(f"\n# now the whole server dies (a reboot, an OOM kill): tmux -L {SERVER} kill-server")
        runner.run(["tmux", "-L", SERVER, "kill-server"], timeout=10, env=app.backend_env)
        say("\n$ mam --backend tmux restore --all")
        restored = _step(record, "restore --all", restore_document(app, [], all_rows=True))
        say("\n".join(f"{a['name']}: {a['outcome']}: {a['message']}" for a in restored["agents"]))
        say("\n$ mam --backend tmux status")
        say(render.status_text(_step(record, "status", status_document(app))))
        say("\n# cleaning up: the demo's tmux server, socket and workspace are removed")
        return 0
    finally:
        runner.run(["tmux", "-L", SERVER, "kill-server"], timeout=10, env=app.backend_env)
        shutil.rmtree(tmpdir, ignore_errors=True)


def _step(record: Callable[[dict[str, Any]], None], command: str, doc: dict[str, Any]) -> dict[str, Any]:
    record({"command": command, "document": doc})
    return doc
