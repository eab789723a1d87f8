"""PyYAML set up once: the C loader and dumper when present, and no implicit timestamps.

Timestamps stay strings so that a row's `created_at` is written back exactly as the user wrote it.
"""

from __future__ import annotations

from typing import Any

import yaml

try:  # the C implementations are several times faster; fall back to pure Python where libyaml is missing
    from yaml import CSafeDumper as _BaseDumper
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeDumper as _BaseDumper  # type: ignore[assignment]
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]


class Loader(_BaseLoader):
    pass


Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}

YAMLError = yaml.YAMLError
MarkedYAMLError = yaml.MarkedYAMLError


def load(text: str) -> Any:
    return yaml.load(text, Loader=Loader)  # noqa: S506 - Loader is a SafeLoader subclass


def compose(text: str) -> yaml.Node | None:
    return yaml.compose(text, Loader=Loader)


def dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_BaseDumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
                     width=1000)


def error_line(exc: yaml.YAMLError) -> int | None:
    """The 1-based line a YAML error points at, when it has one."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return mark.line + 1 if mark is not None else None
