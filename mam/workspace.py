"""Finding the workspace and reading its `.mam/config.yaml`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mam.errors import MamError
from mam.names import is_valid_name

DEFAULT_BACKEND = "herdr"
# First match wins (contract section 1).
WORKSPACE_VARIABLES = ("MAM_WORKSPACE", "WORKSPACE_ROOT", "CLAUDE_PROJECT_DIR")


@dataclass(frozen=True)
class Config:
    path: Path
    backend: str | None = None
    scrub: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()


@dataclass(frozen=True)
class Workspace:
    root: Path
    config: Config = field(default_factory=lambda: Config(Path(".mam/config.yaml")))

    @property
    def dot_mam(self) -> Path:
        return self.root / ".mam"

    @property
    def registry_path(self) -> Path:
        return self.dot_mam / "agent-sessions.yaml"

    @property
    def logs(self) -> Path:
        return self.dot_mam / "logs"


def find_root(explicit: str | None, env: Mapping[str, str], cwd: Path) -> Path:
    if explicit is not None:
        path = Path(explicit)
        if not path.is_dir():
            raise MamError("invalid_workspace", f"--workspace {explicit}: not a directory")
        return path.resolve()
    for var in WORKSPACE_VARIABLES:
        value = env.get(var)
        if value:
            path = Path(value)
            if not path.is_dir():
                raise MamError("invalid_workspace", f"${var}={value}: not a directory",
                               hint=f"unset {var} or point it at the project directory")
            return path.resolve()
    cwd = cwd.resolve()
    for candidate in (cwd, *cwd.parents):
        if (candidate / ".mam").is_dir():
            return candidate
    return cwd


def _string_list(value: object, where: str, path: Path) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise MamError("invalid_config", f"{path}: {where} must be a list of variable names or PREFIX_* patterns")
    return tuple(value)


def load_config(root: Path) -> Config:
    path = root / ".mam" / "config.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise MamError("invalid_config", f"{path}: cannot read: {exc}") from None
    from mam import yamlio

    try:
        data = yamlio.load(text)
    except yamlio.YAMLError as exc:
        line = yamlio.error_line(exc)
        where = f":{line}" if line else ""
        raise MamError("invalid_config", f"{path}{where}: not valid YAML") from None
    if data is None:
        return Config(path)
    if not isinstance(data, dict):
        raise MamError("invalid_config", f"{path}: the top level must be a mapping")
    backend = data.get("backend")
    if backend is not None and not is_valid_name(backend):
        raise MamError("invalid_config", f"{path}: backend must be a backend name, got {backend!r}")
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise MamError("invalid_config", f"{path}: env must be a mapping with scrub: and keep: lists")
    return Config(path, backend, _string_list(env.get("scrub"), "env.scrub", path),
                  _string_list(env.get("keep"), "env.keep", path))


def open_workspace(explicit: str | None = None, env: Mapping[str, str] | None = None,
                   cwd: Path | None = None) -> Workspace:
    env = os.environ if env is None else env
    root = find_root(explicit, env, cwd or Path.cwd())
    return Workspace(root, load_config(root))
