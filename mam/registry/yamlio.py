"""PyYAML set up once: the C loader and dumper when present, no implicit timestamps, and none of the YAML
features a hand edit (or an attacker) can turn against mam.

Timestamps stay strings so that a row's `created_at` is written back exactly as the user wrote it.

Refused, with the line, though PyYAML would take them: anchors and aliases (a 550-byte "billion laughs" file
expands to gigabytes the moment anything walks it, and mam never writes them), merge keys (`<<`, another way
to give one key two values), duplicate keys (PyYAML keeps the last one silently, so the next write would drop
the first), nesting deeper than MAX_DEPTH (the C composer recurses and crashes the process), and integers
too long for Python to convert.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, NodeEvent

from mam.util.errors import MamError
from mam.util.quote import shown

try:  # the C implementations are several times faster; fall back to pure Python where libyaml is missing
    from yaml import CSafeDumper as _BaseDumper
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeDumper as _BaseDumper  # type: ignore[assignment]
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]

YAMLError = yaml.YAMLError
MarkedYAMLError = yaml.MarkedYAMLError
MAX_DEPTH = 64  # a registry row is 4 deep; the C composer crashes somewhere past ten thousand
MERGE_TAG = "tag:yaml.org,2002:merge"


class Refused(yaml.MarkedYAMLError):
    """Valid YAML that mam refuses (see the module docstring); its `problem` is the whole reason."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


def refuse_unknown_keys(mapping: Mapping[Any, Any], allowed: tuple[str, ...], *where: str | int,
                        error: Callable[..., Exception], conjunction: str = ", ", say_where: bool = False) -> None:
    """Refuse a key mam does not know (a misspelled key must not silently drop what it holds): raise
    `error(message, *where, key, at_key=True)`, the message naming the key, `where` too with `say_where`, and
    the keys `allowed` joined by `conjunction`."""
    for key in mapping:
        if key not in allowed:
            inside = f" in `{'.'.join(map(str, where))}:`" if say_where and where else ""
            raise error(f"unknown key {shown(key, 40)}{inside} (expected {conjunction.join(allowed)})",
                        *where, str(key), at_key=True)


def cap(message: str, limit: int = 200) -> str:
    """A message cut to `limit` characters: whatever it quotes, an error stays one readable line."""
    message = " ".join(message.split())
    return message if len(message) <= limit else message[:limit - 3] + "..."


class Loader(_BaseLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                raise Refused("YAML merge keys (<<) are not allowed: write the keys out", key_node.start_mark)
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # an unhashable key: PyYAML itself refuses it, with its line
            if first is not key_node:
                raise Refused(f"duplicate key {shown(key)} (first on line {first.start_mark.line + 1}): "
                              "YAML keeps only the last one", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)

    def construct_int(self, node: yaml.ScalarNode) -> int:
        try:
            return int(super().construct_yaml_int(node))
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise Refused("integer too long", node.start_mark) from None


Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_int)
Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


def _check_events(text: str) -> None:
    """Refuse anchors, aliases and deep nesting from the event stream, before anything is composed or
    expanded. Events come from the C parser, which does not recurse: this costs a sixth of a load."""
    loader = Loader(text)
    depth = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, AliasEvent) or (isinstance(event, NodeEvent) and event.anchor is not None):
                found = f"{'*' if isinstance(event, AliasEvent) else '&'}{event.anchor}"
                raise Refused(f"YAML anchors and aliases are not allowed (found {shown(found, 40)}): "
                              "mam never writes them; write the value out", event.start_mark)
            if isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise Refused(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        # Newer libyaml scans far ahead in flow collections and stops at its own depth limit first.
        if "nesting depth" in str(exc.problem or exc.context or ""):
            raise Refused(f"nested more than {MAX_DEPTH} levels deep", exc.problem_mark or exc.context_mark) from None
        raise
    finally:
        loader.dispose()


def load(text: str) -> Any:
    _check_events(text)
    return yaml.load(text, Loader=Loader)  # Loader is a SafeLoader subclass


def compose(text: str) -> yaml.Node | None:
    _check_events(text)
    return yaml.compose(text, Loader=Loader)


def dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_BaseDumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
                     width=1000)


def error_line(exc: yaml.YAMLError) -> int | None:
    """The 1-based line a YAML error points at, when it has one (PyYAML's marks count from 0). A token the
    scanner could not finish (`server s1`, a key without its colon; an open quote) or an unclosed flow
    collection is found wrong only on a later line, where the problem mark is: its context mark is the line to
    fix. A block collection's context is where it began, which may be far above: there the problem mark is."""
    problem, context = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    started = str(getattr(exc, "context", None) or "")
    if context is not None and started.startswith(("while scanning", "while parsing a flow",
                                                   "while parsing a quoted")):
        mark = context
    else:
        mark = problem or context
    return mark.line + 1 if mark is not None else None


def error_message(exc: yaml.YAMLError) -> str:
    """What is wrong, without PyYAML's multi-line excerpt of the file."""
    if isinstance(exc, Refused):
        return cap(str(exc.problem))
    return cap(f"not valid YAML: {getattr(exc, 'problem', None) or 'cannot parse'}")


def refusal(kind: str, path: Any, line: int | None, message: str, hint: str | None = None) -> MamError:
    """The one-line error for a file mam refuses: `path:line: message`, the message capped."""
    return MamError(kind, f"{path}{f':{line}' if line else ''}: {cap(message)}", hint=hint)


def load_or_refuse(text: str, path: Any, kind: str, hint: str | None = None) -> Any:
    """`load`, a YAML error raised as a MamError of `kind` naming `path` and the line."""
    try:
        return load(text)
    except YAMLError as exc:
        raise refusal(kind, path, error_line(exc), error_message(exc), hint) from None


def line_of(text: str, path: Sequence[str | int], at_key: bool = False) -> int | None:
    """The 1-based line of the node at `path` (mapping keys and list indexes) in a text that loads, or of the
    deepest node the path reaches; with `at_key`, the line of the last key rather than of its value. Only
    for error messages: it parses the text again."""
    try:
        node = compose(text)
    except YAMLError:
        return None
    if node is None:
        return None
    for depth, step in enumerate(path):
        last = depth == len(path) - 1
        if isinstance(node, yaml.MappingNode):
            pair = next((p for p in node.value if isinstance(p[0], yaml.ScalarNode) and p[0].value == step), None)
            if pair is None:
                break
            node = pair[0] if last and at_key else pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and 0 <= step < len(node.value):
            node = node.value[step]
        else:
            break
    return int(node.start_mark.line) + 1
