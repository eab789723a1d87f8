"""Every hook spec is documented in docs/backends.md with its exact signature."""

from __future__ import annotations

import inspect
from pathlib import Path

import mam.hookspecs

DOCS = (Path(__file__).resolve().parent.parent / "docs" / "backends.md").read_text().replace("\\|", "|")


def test_every_hook_is_documented_with_its_signature() -> None:
    hooks = [name for name in dir(mam.hookspecs) if name.startswith("mam_")]
    assert len(hooks) == 8
    for name in hooks:
        signature = str(inspect.signature(getattr(mam.hookspecs, name))).replace("'", "")
        assert f"`{name}{signature}`" in DOCS, f"{name}{signature} is not in docs/backends.md"
