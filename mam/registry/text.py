"""The registry's text form: what mam writes, and the fast way to read back what it wrote.

mam writes each row as one JSON object on its own line (`- {"name": "a", "server": "s", ...}`). JSON is a
subset of YAML's flow style, so the file stays a plain YAML document that any YAML reader (and a person)
reads as before, but a reader can take such a line with `json.loads`, some thirty times faster than PyYAML
builds the same row. A line is only taken that way when it is exactly what mam itself would write for the
value it holds; anything else (a hand edit, a comment, block style, a float) sends the whole file through
PyYAML, so both ways always give the same document.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Deferred imports (inside functions), for start-up: the YAML reader (PyYAML) loads only for a file not in the form
# mam writes.

# The lists whose rows are written one per line.
ROW_LISTS = ("sessions", "herdr_sessions")
# Characters that JSON leaves raw but that YAML reads differently or refuses in a stream: C1 controls (U+0085
# is a YAML line break), the Unicode line and paragraph separators, the byte order mark, and non-characters.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")
_MAX_KEY = 1000  # PyYAML refuses simple keys longer than 1024 characters


def _no_float(text: str) -> Any:
    raise ValueError(f"not a value mam writes as JSON: {text}")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):  # json keeps the last of a repeated key; YAML refuses the file (yamlio)
        raise ValueError("duplicate key")
    return result


_encode = json.JSONEncoder(ensure_ascii=False).encode
# No floats (YAML 1.1 reads `1e+16` as a string) and no NaN: a row holding one is written as YAML instead.
# A repeated key is never taken either: the line goes to YAML, which names it.
_decode = json.JSONDecoder(parse_float=_no_float, parse_constant=_no_float, object_pairs_hook=_unique_keys).decode


def _short_keys(value: Any) -> bool:
    if isinstance(value, list):
        return all(_short_keys(v) for v in value)
    if isinstance(value, dict):
        return all(len(k) < _MAX_KEY and _short_keys(v) for k, v in value.items())
    return True


def _row_line(row: Any) -> str | None:
    """The row as one JSON line that YAML reads back as the same row, or None when there is none."""
    if not isinstance(row, dict):
        return None
    try:
        text = _encode(row)
        if _YAML_UNSAFE.search(text) or _decode(text) != row:  # floats, tuples, non-string keys
            return None
    except (TypeError, ValueError):
        return None
    return text if len(text) < _MAX_KEY or _short_keys(row) else None


def dump(document: dict[str, Any]) -> str:
    """The registry text: rows one JSON line each where every row allows it, any other key as PyYAML writes
    it. Key order is kept."""
    parts: list[str] = []
    other: dict[str, Any] = {}
    for key, value in document.items():
        if key == "version" and type(value) is int:
            parts.append(f"version: {value}\n")
            continue
        lines = [_row_line(row) for row in value] if key in ROW_LISTS and isinstance(value, list) else None
        if lines is None or None in lines:
            other[key] = value
            parts.append("")  # a placeholder: YAML text for this key, filled in below
            continue
        parts.append(f"{key}: []\n" if not lines else f"{key}:\n" + "".join(f"- {line}\n" for line in lines))
    if other:
        import mam.registry.yamlio as yamlio

        dumped = iter(yamlio.dump({key: value}) for key, value in other.items())
        parts = [part or next(dumped) for part in parts]
    return "".join(parts)


_HEADER = re.compile(r"(version|sessions|herdr_sessions): ?(.*)")
_VERSION = re.compile(r"[0-9]{1,9}")  # ASCII digits, few enough for int(): anything else is YAML's to read


def fast_load(text: str) -> dict[str, Any] | None:
    """The document of a file in exactly the form `dump` writes with every row as a JSON line, else None (the
    caller then parses it as YAML)."""
    if not text.endswith("\n") or "\r" in text:
        return None
    document: dict[str, Any] = {}
    rows: list[Any] | None = None
    bare: list[str] = []  # `sessions:` headers: with no row under them, YAML reads null, not []
    for line in text[:-1].split("\n"):
        if line.startswith("- "):
            if rows is None:
                return None
            text = line[2:]
            try:
                row = _decode(text)
            except ValueError:
                return None
            if type(row) is not dict or _encode(row) != text or _YAML_UNSAFE.search(text) or (
                    len(text) >= _MAX_KEY and not _short_keys(row)):
                return None  # not exactly what mam writes: leave it to YAML
            rows.append(row)
            continue
        match = _HEADER.fullmatch(line)
        if match is None or match[1] in document:
            return None
        key, rest = match[1], match[2]
        if key == "version":
            if not _VERSION.fullmatch(rest) or line != f"version: {int(rest)}":
                return None
            document[key], rows = int(rest), None
        elif line == f"{key}:":
            document[key] = rows = []
            bare.append(key)
        elif line == f"{key}: []":
            document[key], rows = [], None
        else:
            return None
    for key in bare:
        if not document[key]:
            document[key] = None
    return document
