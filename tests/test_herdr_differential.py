"""The fake herdr held to the real one: one script of the herdr CLI calls mam makes (and their error cases), run
on both; each answer's exit code, which stream it is on, and its JSON shape (key sets, types; ids, times and
paths aside) must be the same. Runs when a herdr mam supports is on PATH (skipped otherwise, with the reason)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from herdr_kit import CONFIG, STANDIN_BIN, HerdrKit, real_herdr

from conftest import FAKES, base_env

S = "diff"
_spec = importlib.util.spec_from_file_location("herdr_diff_standin", Path(__file__).parent / "agents" / "standin.py")
assert _spec is not None and _spec.loader is not None
STANDIN = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(STANDIN)  # the session every call names


def shape(value: Any) -> Any:
    """What must match: keys and types, never values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    return type(value).__name__


def answer(done: Any) -> dict[str, Any]:
    """One call's answer as it must match: exit code, what is on each stream (JSON by shape, an error's code and
    id; other text only whether there is any)."""
    out: dict[str, Any] = {"exit": done.returncode}
    for stream in ("stdout", "stderr"):
        text = getattr(done, stream).strip()
        try:
            doc = json.loads(text)
        except ValueError:
            out[stream] = "text" if text else ""
            continue
        out[stream] = shape(doc)
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            out[stream + "_error"] = (doc["error"].get("code"), doc.get("id"))
        if isinstance(doc, dict) and isinstance(doc.get("result"), dict):
            out[stream + "_type"] = (doc["result"].get("type"), doc.get("id"))
    return out


def script(kit: HerdrKit, cwd: Path) -> list[tuple[str, dict[str, Any]]]:
    """The calls, in order, on `kit`; each with its answer."""
    calls: list[tuple[str, dict[str, Any]]] = []

    def call(*args: str) -> Any:
        done = kit.run(*args)
        calls.append((" ".join(args), answer(done)))
        return done

    log, control = cwd / "got.log", cwd / "control"
    call("--session", S, "agent", "list")  # no server
    call("--session", S, "agent", "list", "--json")
    call("session", "list", "--json")
    call("--session", S, "agent", "read", "w1:p1", "--source", "visible", "--lines", "5")
    call("--session", S, "pane", "close", "w1:p1")
    kit.start(S)
    call("--session", S, "agent", "list")
    call("--session", S, "agent", "list", "--json")
    made = call("--session", S, "workspace", "create", "--cwd", str(cwd), "--label", "one", "--env", "A=1",
                "--no-focus")
    pane = json.loads(made.stdout)["result"]["root_pane"]["pane_id"]
    call("--session", S, "workspace", "create", "--cwd", str(cwd), "--env", "A", "--no-focus")
    call("--session", S, "agent", "start", "Bad", "--kind", "claude", "--pane", pane, "--timeout", "20000")
    call("--session", S, "agent", "start", "one", "--kind", "nosuch", "--pane", pane)
    call("--session", S, "agent", "start", "one", "--kind", "claude", "--pane", "w9:p9", "--timeout", "20000")
    call("--session", S, "agent", "start", "one", "--kind", "claude", "--pane", pane, "--timeout", "1000")
    call("--session", S, "agent", "start", "one", "--kind", "claude", "--pane", pane, "--timeout", "20000", "--",
         *kit.standin(log, control))
    call("--session", S, "agent", "start", "one", "--kind", "claude", "--pane", pane, "--timeout", "20000")
    call("--session", S, "agent", "list")
    call("--session", S, "pane", "send-text", pane, "hello")
    call("--session", S, "pane", "send-text", pane, "--", "x")
    call("--session", S, "pane", "send-text", pane, "--session=x")
    call("--session", S, "pane", "send-text", pane)
    call("--session", S, "pane", "send-text", "w9:p9", "hello")
    call("--session", S, "pane", "send-keys", pane, "Enter")
    call("--session", S, "agent", "prompt", pane, "two\nlines")
    call("--session", S, "agent", "prompt", pane, "")
    call("--session", S, "agent", "prompt", "nosuch", "hi")
    call("--session", S, "agent", "prompt", pane)
    if kit.kind == "fake":  # the fake's screen of the pane: what the stand-in draws on the real one
        (kit.session_dir(S) / f"screen-{pane}.txt").write_text(STANDIN.screen("claude", "idle"))
    call("--session", S, "agent", "read", pane, "--source", "visible", "--lines", "5")
    call("--session", S, "agent", "read", pane, "--source", "recent", "--lines", "5")
    call("--session", S, "agent", "read", pane)
    call("--session", S, "agent", "read", "nosuch", "--source", "visible", "--lines", "5")
    kit.set_state(S, "one", control, "blocked")
    kit.wait(lambda: (kit.agent(S, "one") or {}).get("agent_status") == "blocked", "blocked")
    call("--session", S, "agent", "prompt", pane, "hi")
    call("--session", S, "pane", "close", pane)
    call("--session", S, "pane", "close", pane)
    call("--session", S, "agent", "list")
    # agent start's other endings: a program that exits during its start, and another kind than asked for
    for outcome in ("exited", "mismatch"):
        made = kit.run("--session", S, "workspace", "create", "--cwd", str(cwd), "--no-focus")
        pane = json.loads(made.stdout)["result"]["root_pane"]["pane_id"]
        args = kit.standin(log, control, outcome)
        if outcome == "exited":  # listed while it starts (kind not known yet), then gone
            pending = kit.popen("--session", S, "agent", "start", outcome, "--kind", "claude", "--pane", pane,
                                "--timeout", "5000", "--", *args)
            kit.wait(lambda: kit.agent(S, "exited") is not None, "listed while it starts")
            call("--session", S, "agent", "list")
            out, err = pending.communicate(timeout=30)
            calls.append(("agent start (exits)", answer(subprocess.CompletedProcess([], pending.returncode, out,
                                                                                    err))))
        else:
            call("--session", S, "agent", "start", outcome, "--kind", "claude", "--pane", pane, "--timeout", "5000",
                 "--", *args)
        call("--session", S, "agent", "list")
    return calls


@pytest.fixture
def kits(tmp_path: Path) -> Iterator[tuple[HerdrKit, HerdrKit]]:
    binary, why = real_herdr(os.environ.get("PATH", ""))
    if binary is None:
        pytest.skip(f"the real herdr: {why} (docs/backends.md, 'herdr', says how to build 0.8.2 by hand and put "
                    "it first on PATH)")
    made = []
    for kind in ("fake", "real"):
        config = Path(tempfile.mkdtemp(prefix=f"hd{kind[0]}", dir="/tmp"))
        home = tmp_path / kind
        home.mkdir()
        env = base_env(home, XDG_CONFIG_HOME=str(config), XDG_STATE_HOME=str(config / "state"), SHELL="/bin/sh",
                       TERM="xterm-256color")
        first = [str(STANDIN_BIN)] + ([str(Path(binary).parent)] if kind == "real" else [str(FAKES)])
        env["PATH"] = os.pathsep.join(first + [p for p in env["PATH"].split(os.pathsep) if Path(p) != FAKES])
        kit = HerdrKit(kind, env, config)
        kit.root.mkdir(parents=True)
        (kit.root / "config.toml").write_text(CONFIG)
        made.append(kit)
    try:
        yield made[0], made[1]
    finally:
        for kit in made:
            kit.cleanup()
            shutil.rmtree(kit.config, ignore_errors=True)


def test_the_fake_answers_every_call_as_the_real_herdr_does(kits: tuple[HerdrKit, HerdrKit],
                                                           tmp_path: Path) -> None:
    fake, real = kits
    (tmp_path / "f").mkdir()
    (tmp_path / "r").mkdir()
    on_fake = script(fake, tmp_path / "f")
    on_real = script(real, tmp_path / "r")
    differences = [(call, f, r) for (call, f), (_, r) in zip(on_fake, on_real, strict=True) if f != r]
    assert differences == [], "\n".join(f"{c}\n  fake: {f}\n  real: {r}" for c, f, r in differences)
