"""The entry points of one group, read straight from the installed distributions' files.

`importlib.metadata` is slow to import and scan (it brings email, zipfile, csv and more; bench/RESULTS.md has the
figures). This reads the very files it reads, `entry_points.txt` in every `*.dist-info` and
`*.egg-info` directory of each `sys.path` folder, with its rules: folders in `sys.path` order, a distribution
name counted once (the first one found wins), and among entry points of one name the last one read wins. Where
distributions may come from elsewhere (a zip file on `sys.path`, a finder that serves its own distributions),
it hands over to `importlib.metadata`, so nothing installed is ever missed.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

_DIST_DIR = re.compile(r"(?P<name>[^-]+)(?:-[^-]*)*\.(?:dist|egg)-info")


@dataclass(frozen=True)
class EntryPoint:
    name: str
    value: str  # "module" or "module:attribute"
    provider: str  # "distribution version", for messages

    def load(self) -> Any:
        module_name, _, attribute = self.value.partition(":")
        target: Any = importlib.import_module(module_name.strip())
        for part in filter(None, attribute.strip().split(".")):
            target = getattr(target, part)
        return target


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def _section(text: str, group: str) -> list[tuple[str, str]]:
    """`name = value` lines of the `[group]` section of an entry_points.txt."""
    found: list[tuple[str, str]] = []
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
        elif current == group and "=" in line:
            name, value = line.split("=", 1)
            found.append((name.strip(), value.strip()))
    return found


def _provider(directory: str, fallback: str) -> str:
    """"Name Version" from the distribution's METADATA (or PKG-INFO) headers."""
    text = _read(os.path.join(directory, "METADATA")) or _read(os.path.join(directory, "PKG-INFO")) or ""
    headers: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        headers.setdefault(key.strip().lower(), value.strip())
    name = headers.get("name") or fallback
    return f"{name} {headers['version']}" if "version" in headers else name


def _plain_paths_only() -> bool:
    """True when every distribution lives in a plain folder of sys.path, found by the standard path finder."""
    from importlib.machinery import PathFinder

    if any(getattr(finder, "find_distributions", None) is not None and finder is not PathFinder
           for finder in sys.meta_path):
        return False
    return not any(entry and os.path.isfile(entry) for entry in sys.path)


def _from_importlib_metadata(group: str) -> list[EntryPoint]:
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group=group):
        dist = ep.dist
        provider = f"{dist.metadata['Name']} {dist.version}" if dist is not None else ep.value
        found.append(EntryPoint(ep.name, ep.value, provider))
    return found


def entry_points(group: str) -> list[EntryPoint]:
    """Every entry point of `group`, in the order importlib.metadata gives them."""
    if not _plain_paths_only():
        return _from_importlib_metadata(group)
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            match = _DIST_DIR.fullmatch(name)
            if match is None or _normalized(match["name"]) in seen:
                continue
            seen.add(_normalized(match["name"]))
            directory = os.path.join(folder or ".", name)
            text = _read(os.path.join(directory, "entry_points.txt"))
            if text is None:
                continue
            points = _section(text, group)
            if points:
                provider = _provider(directory, match["name"])
                found += [EntryPoint(n, v, provider) for n, v in points]
    return found
