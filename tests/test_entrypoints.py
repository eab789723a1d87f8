"""mam's own entry-point reader gives what importlib.metadata gives, at a fraction of the start-up cost."""

from __future__ import annotations

import importlib.metadata
import sys
import zipfile
from pathlib import Path

import pytest

from mam.plugin import entrypoints


def _groups() -> list[str]:
    return sorted({ep.group for dist in importlib.metadata.distributions() for ep in dist.entry_points})


def test_every_group_of_this_environment_reads_as_importlib_metadata_reads_it() -> None:
    groups = _groups()
    assert "console_scripts" in groups and "mam.backends" in groups
    for group in groups:
        theirs = [(ep.name, ep.value, f"{ep.dist.metadata['Name']} {ep.dist.version}" if ep.dist else ep.value)
                  for ep in importlib.metadata.entry_points(group=group)]
        ours = [(ep.name, ep.value, ep.provider) for ep in entrypoints.entry_points(group)]
        assert ours == theirs, group


def _dist(folder: Path, dirname: str, entry_points: str, metadata: str | None = None) -> None:
    directory = folder / dirname
    directory.mkdir(parents=True)
    (directory / "entry_points.txt").write_text(entry_points)
    if metadata is not None:
        (directory / ("PKG-INFO" if dirname.endswith(".egg-info") else "METADATA")).write_text(metadata)


def test_hand_made_folders_first_distribution_wins_and_values_load(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "mam_demo_plugin-2.0.dist-info", "# a comment\n[mam.backends]\nalpha = os.path:join\n"
          "[other]\nzeta = x\n", "Metadata-Version: 2.1\nName: mam-demo-plugin\nVersion: 2.0\n\nbody")
    _dist(second, "mam.demo_plugin-1.0.dist-info", "[mam.backends]\nshadowed = os\n")  # same name, normalized
    _dist(second, "other_plugin.egg-info", "[mam.backends]\n beta = json \n", "Name: other-plugin\n")
    monkeypatch.setattr(sys, "path", [str(first), str(second), *sys.path])
    found = [ep for ep in entrypoints.entry_points("mam.backends") if ep.name in ("alpha", "beta", "shadowed")]
    assert [(ep.name, ep.value, ep.provider) for ep in found] == [
        ("alpha", "os.path:join", "mam-demo-plugin 2.0"), ("beta", "json", "other-plugin")]
    import json
    import os

    assert found[0].load() is os.path.join and found[1].load() is json
    theirs = [(ep.name, ep.value) for ep in importlib.metadata.entry_points(group="mam.backends")
              if ep.name in ("alpha", "beta", "shadowed")]
    assert theirs == [(ep.name, ep.value) for ep in found]


def test_a_zip_on_sys_path_is_left_to_importlib_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipped_plugin-1.0.dist-info/METADATA", "Name: zipped-plugin\nVersion: 1.0\n")
        zf.writestr("zipped_plugin-1.0.dist-info/entry_points.txt", "[mam.backends]\nzipped = zipped_plugin\n")
    monkeypatch.setattr(sys, "path", [str(archive), *sys.path])
    found = {ep.name: ep for ep in entrypoints.entry_points("mam.backends")}
    assert found["zipped"].provider == "zipped-plugin 1.0"
