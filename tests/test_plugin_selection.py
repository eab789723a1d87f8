"""MAM_LOAD_PLUGINS and MAM_DISABLE_PLUGINS: a typo or a disabled backend is said, never silently ignored."""

from __future__ import annotations

from conftest import Workspace


def test_a_disabled_selected_backend_says_which_variable_left_it_out(ws: Workspace) -> None:
    for var, value in (("MAM_DISABLE_PLUGINS", "tmux"), ("MAM_LOAD_PLUGINS", "zellij")):
        proc = ws.mam("--backend", "tmux", "status", env={**ws.env, var: value})
        assert proc.returncode == 3, proc.stderr
        assert proc.stderr.splitlines()[0] == (f"mam: backend 'tmux' is installed but not loaded: ${var}={value} "
                                               "leaves it out")


def test_names_no_plugin_has_are_reported_by_backends(ws: Workspace) -> None:
    doc = ws.mam_json("backends", env={**ws.env, "MAM_DISABLE_PLUGINS": "tmxu,herdr", "MAM_LOAD_PLUGINS": "tmux,zelij"})
    errors = sorted(e["error"] for e in doc["backends"] if e["error"])
    assert any("MAM_DISABLE_PLUGINS names 'tmxu': no installed plugin is named 'tmxu'" in e for e in errors), errors
    assert any("MAM_DISABLE_PLUGINS names 'herdr': herdr is built in and always loaded" in e for e in errors)
    assert any("MAM_LOAD_PLUGINS names 'zelij'" in e for e in errors)
    names = {e["name"] for e in doc["backends"] if not e["error"]}
    assert names == {"herdr", "tmux"}  # the typo did not load zellij, and herdr stays
