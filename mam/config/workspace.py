"""Finding the workspace and reading its `.mam/config.yaml`."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mam.registry.file import REGISTRY_VARIABLE
from mam.util.errors import MamError
from mam.util.names import is_valid_name
from mam.util.quote import shown
from mam.util.safefile import leads_inside, read_text

# Deferred imports (inside functions), for start-up: the YAML reader (PyYAML) loads only when a config file is there.

DEFAULT_BACKEND = "herdr"
# First match wins (docs/cli.md).
WORKSPACE_VARIABLES = ("MAM_WORKSPACE", "WORKSPACE_ROOT", "CLAUDE_PROJECT_DIR")
# The registry file the user named, used instead of `.mam/agent-sessions.yaml` (docs/registry.md): the one way to
# keep the registry outside the workspace, since a link there is only followed while it stays inside.


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
    named_registry: Path | None = None  # $MAM_REGISTRY: the user's own choice of file, links and all

    @property
    def dot_mam(self) -> Path:
        return self.root / ".mam"

    @property
    def registry_path(self) -> Path:
        return self.named_registry or self.dot_mam / "agent-sessions.yaml"

    @property
    def registry_within(self) -> Path | None:
        """Where a symbolic link on the way to the registry must lead (mam.registry.file): the workspace, since a
        clone may carry the link; None for a file the user named ($MAM_REGISTRY), which is followed anywhere."""
        return None if self.named_registry is not None else self.root

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


def check_dot_mam(root: Path) -> None:
    """A `.mam` that is a symbolic link leading outside the workspace is refused: a clone can carry one, and every
    file mam keeps there (registry, locks, logs, reports, ssh sockets) would land, or be read, wherever it
    points. A link that stays inside the workspace is followed."""
    dot = root / ".mam"
    if dot.is_symlink() and not leads_inside(dot, root):
        target = shown(os.path.realpath(dot), 200, quote="repr", cut="inside")
        raise MamError("invalid_workspace", f"{dot}: a symbolic link leading outside the workspace (to {target}): "
                       "mam neither reads nor writes through it",
                       hint="remove the link; mam makes .mam itself")


def named_registry(env: Mapping[str, str]) -> Path | None:
    """$MAM_REGISTRY as an absolute path, None when unset or empty."""
    value = env.get(REGISTRY_VARIABLE)
    if not value:
        return None
    if not os.path.isabs(value):
        raise MamError("usage", f"${REGISTRY_VARIABLE}={shown(value, 80)}: expected an absolute path to the "
                       "registry file", hint=f"unset {REGISTRY_VARIABLE} to use the workspace's own")
    return Path(value)


CONFIG_KEYS = ("backend", "env")
MAX_CONFIG_BYTES = 1 << 20  # a config is a few lines: anything larger is refused unread
ENV_KEYS = ("scrub", "keep")
# A variable name, or a prefix ending in `*` (envscrub.matches); `*` alone is every variable.
_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?|\*")
_CONFIG_HINT = "fix .mam/config.yaml: it takes `backend:` and `env:` with `scrub:` and `keep:` lists"


class _ConfigError(Exception):
    def __init__(self, message: str, *where: str | int, at_key: bool = False) -> None:
        super().__init__(message)
        self.message, self.where, self.at_key = message, where, at_key


def _patterns(env: dict[object, object], key: str) -> tuple[str, ...]:

    value = env.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _ConfigError(f"env.{key} must be a list of variable names or PREFIX_* patterns, "
                           f"got {type(value).__name__} {shown(value, 40)}", "env", key)
    for index, pattern in enumerate(value):
        if not isinstance(pattern, str) or not _PATTERN.fullmatch(pattern):
            raise _ConfigError(f"env.{key}: {shown(pattern, 40)} is not a variable name or a PREFIX_* "
                               "pattern", "env", key, index)
    return tuple(value)


def _config(data: object, path: Path, keys: tuple[str, ...] = CONFIG_KEYS) -> Config:
    from mam.registry import yamlio

    if data is None:
        return Config(path)
    if not isinstance(data, dict):
        raise _ConfigError(f"the top level must be a mapping, got {type(data).__name__}")
    yamlio.refuse_unknown_keys(data, keys, error=_ConfigError, conjunction=" or ", say_where=True)
    backend = data.get("backend")
    if backend is not None and not is_valid_name(backend):
        raise _ConfigError(f"backend must be a backend name, got {shown(backend, 40)}", "backend")
    env = data.get("env")
    if env is None:  # `env:` with nothing under it
        return Config(path, backend)
    if not isinstance(env, dict):
        raise _ConfigError(f"env must be a mapping with scrub: and keep: lists, got {type(env).__name__} "
                           f"{shown(env, 40)}", "env")
    yamlio.refuse_unknown_keys(env, ENV_KEYS, "env", error=_ConfigError, conjunction=" or ", say_where=True)
    return Config(path, backend, _patterns(env, "scrub"), _patterns(env, "keep"))


def load_config(root: Path) -> Config:
    """`.mam/config.yaml`, validated: anything mam would not use is refused with its line, never ignored."""
    return _load(root / ".mam" / "config.yaml", CONFIG_KEYS, _CONFIG_HINT)


def _load(path: Path, keys: tuple[str, ...], hint: str) -> Config:
    text = read_text(path, path, MAX_CONFIG_BYTES, "invalid_config", hint)
    if text is None:
        return Config(path)
    from mam.registry import yamlio

    document = yamlio.load_or_refuse(text, path, "invalid_config", hint)
    try:
        return _config(document, path, keys)
    except _ConfigError as err:
        line = yamlio.line_of(text, err.where, at_key=err.at_key)
        raise yamlio.refusal("invalid_config", path, line, err.message, hint) from None


def user_config_dir(env: Mapping[str, str]) -> Path:
    """$XDG_CONFIG_HOME/mam (an absolute XDG_CONFIG_HOME only, as the XDG spec says), else ~/.config/mam: the
    user's own folder, outside every workspace, so a clone never carries it."""
    config = env.get("XDG_CONFIG_HOME") or ""
    if not os.path.isabs(config):
        home = env.get("HOME") or os.path.expanduser("~")
        config = os.path.join(home, ".config")
    return Path(config) / "mam"


# The user's own config takes `env:` only: the backend is a workspace's choice ($MAM_BACKEND, --backend).
USER_CONFIG_KEYS = ("env",)


def load_user_config(env: Mapping[str, str]) -> Config:
    """The user's own `config.yaml` (user_config_dir), validated as a workspace's; trusted, unlike that one: its
    `keep` may keep what a workspace's may not (mam.plugin.envscrub.may_keep)."""
    path = user_config_dir(env) / "config.yaml"
    return _load(path, USER_CONFIG_KEYS, f"fix {path}: it takes `env:` with `scrub:` and `keep:` lists")


def open_workspace(explicit: str | None = None, env: Mapping[str, str] | None = None,
                   cwd: Path | None = None) -> Workspace:
    env = os.environ if env is None else env
    root = find_root(explicit, env, cwd or Path.cwd())
    check_dot_mam(root)
    return Workspace(root, load_config(root), named_registry(env))
