"""The agent-kind library: the shipped `agents.yaml` plus a workspace's `.mam/states.yaml`, validated.

Both files have one format (docs/states.md). Anything mam would not use is refused with its file and line,
never ignored: a misspelled key or a regex that does not compile must not silently drop a rule.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mam.util.errors import MamError
from mam.util.names import SESSION_ID_PATTERN
from mam.util.quote import shown

# Deferred imports (inside functions), for start-up: the YAML reader (PyYAML) and safe files load only when a
# workspace overrides the kinds.

RULE_STATES = ("blocked", "working", "idle")  # in rank order: the first state whose rule matches wins
MAX_LINES = 200
MAX_FILE_BYTES = 1 << 20
MAX_PATTERN = 1000
TOP_KEYS = ("schema", "kinds")
SPAWN_ONLY = "spawn_only"  # agents.yaml only: agents mam starts by name but has no kind for (agent_programs)
KIND_KEYS = ("programs", "session_options", "resume", "new_session", "rules")
RULE_KEYS = ("id", "state", "pattern", "lines")
OPTIONAL_RULE_KEYS = ("at",)
# Where a rule reads (docs/states.md, "The live part"): `bottom`, the last `lines` non-empty lines of the screen
# (a full-screen agent erases a dialog once it is answered, and draws a footer under its question); `cursor`,
# the live block at the cursor (a line-mode question is live only while input is typed after it).
RULE_PLACES = ("bottom", "cursor")
_KIND_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
_RULE_ID = re.compile(r"[a-z0-9_-]{1,40}")
_OPTION = re.compile(r"-{1,2}[A-Za-z0-9][A-Za-z0-9_-]{0,40}")
_HINT = "fix .mam/states.yaml: see docs/states.md for its format"
# Launchers whose first argument that is not an option names the program (`npx @openai/codex`).
_LAUNCHERS = ("npx", "bunx", "pnpx", "node", "bun", "deno")
_PYTHON = re.compile(r"python[0-9.]*")
_SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".py")


@dataclass(frozen=True)
class Rule:
    id: str
    state: str
    pattern: str
    lines: int
    regex: re.Pattern[str]
    at: str = "bottom"  # one of RULE_PLACES


@dataclass(frozen=True)
class Kind:
    name: str
    programs: tuple[str, ...]
    session_options: tuple[str, ...]
    resume: tuple[str, ...] | None
    rules: tuple[Rule, ...]  # in the order they are tried within a state
    # The options that start the agent with a session id mam chooses, so that it can be resumed later.
    new_session: tuple[str, ...] | None = None


class _Invalid(Exception):
    def __init__(self, message: str, *where: str | int, at_key: bool = False) -> None:
        super().__init__(message)
        self.message, self.where, self.at_key = message, where, at_key


@dataclass(frozen=True)
class Library:
    kinds: Mapping[str, Kind]

    def kind_of(self, argv: Sequence[str], given: str | None) -> str | None:
        """The kind the program `argv` runs is (`npx @openai/codex` is codex), else `given` (the --agent or
        spec kind) when the library knows it."""
        return self.kind_for(argv) or (given if given in self.kinds else None)

    def kind_for(self, argv: Sequence[str]) -> str | None:
        """The kind whose `programs` holds the basename of the program `argv` runs, or None.

        Looked through, in this order: `env` with its options, NAME=VALUE assignments and `--`; a Node launcher
        (npx, bunx, pnpx, node, bun, deno) and its options, then the script or package named next (a version
        `@1.2` and a `.js` suffix dropped); `python[3[.N]]` with its options, then `-m MODULE` (its first
        dotted part) or the script. An option that takes its value as the next word (`node -r x cli.js`) is
        not understood: the value is read as the program, which then matches no kind."""
        words = list(argv)
        program = _skip_env(words)
        if program is None:
            return None
        name = os.path.basename(program)
        if name in _LAUNCHERS or _PYTHON.fullmatch(name):
            name = _launched(name, words) or ""
        for kind in self.kinds.values():
            if name and name in kind.programs:
                return kind.name
        return None

    def session_from_args(self, kind: str, args: Sequence[str]) -> str | None:
        """The agent's own session id given in `args` (the words after the program) by one of the kind's
        `session_options`, as `--opt VALUE` or `--opt=VALUE`; the last one given wins. A next word that starts
        with `-` is not a value, and nothing after `--` is an option."""
        entry = self.kinds.get(kind)
        if entry is None:
            return None
        found: str | None = None
        for value, is_option in _session_words(entry.session_options, args):
            if is_option and value:
                found = value
        return found

    def new_session_args(self, kind: str | None, session: str) -> list[str] | None:
        """The options that start `kind` with the session id `session` (mam's own choice), or None when the
        kind has no `new_session`."""
        entry = self.kinds.get(kind) if kind else None
        if entry is None or entry.new_session is None:
            return None
        return [session if word == "{session}" else word for word in entry.new_session]

    def resume_argv(self, kind: str, program: str, args: Sequence[str], session: str) -> list[str] | None:
        """The argv that resumes `session`: `program`, then the kind's `resume` template with `{session}` and
        `{args}` (the original args minus any session option and its value) put in as whole words, or None when
        the kind has no `resume`. An original `--` and what follows it stay last, so they remain positional."""
        entry = self.kinds.get(kind)
        if entry is None or entry.resume is None:
            return None
        if not SESSION_ID_PATTERN.fullmatch(session) or ".." in session:
            # An id like "--dangerously-skip-permissions" would be read by the agent as an option, one like
            # "../x" as a path to some other transcript.

            raise MamError("invalid_name", f"agent session id {shown(session)} cannot be resumed: "
                           "it must be one word of letters, digits and . _ : - (not starting with '-', no '/' or '..')")
        kept = [word for word, is_option in _session_words(entry.session_options, args) if not is_option]
        head, tail = _split_dashdash(kept)
        out = [program]
        for word in entry.resume:
            if word == "{args}":
                out.extend(head)
            elif word == "{session}":
                out.append(session)
            else:
                out.append(word)
        return out + tail if "{args}" in entry.resume else out


def _split_dashdash(words: list[str]) -> tuple[list[str], list[str]]:
    if "--" in words:
        at = words.index("--")
        return words[:at], words[at:]
    return words, []


def _session_words(options: Sequence[str], args: Sequence[str]) -> list[tuple[str, bool]]:
    """`args` as (word, is_session_option) pairs: a session option and its value fold into one pair, (the
    value or "" when none was given, True); any other word is (word, False)."""
    out: list[tuple[str, bool]] = []
    index, positional = 0, False
    while index < len(args):
        word = args[index]
        index += 1
        if positional or word == "--":
            positional = True
            out.append((word, False))
            continue
        name, eq, value = word.partition("=")
        if name in options and eq:
            out.append((value, True))
        elif word in options:
            value = ""
            if index < len(args) and args[index] and not args[index].startswith("-"):
                value = args[index]
                index += 1
            out.append((value, True))
        else:
            out.append((word, False))
    return out


def _skip_env(words: list[str]) -> str | None:
    """Pop the program off `words` (in place), looking through `env [options] [NAME=VALUE]... [--]`."""
    if not words:
        return None
    program = words.pop(0)
    if os.path.basename(program) != "env":
        return program
    while words:
        word = words.pop(0)
        if word == "--":
            break
        if word in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string"):
            if words:
                words.pop(0)
        elif word.startswith("-") or ("=" in word and not word.startswith("=")):
            continue
        else:
            return word
    return words.pop(0) if words else None


def _launched(launcher: str, words: list[str]) -> str | None:
    """The program a launcher runs, from the words after it (see Library.kind_for)."""
    python = bool(_PYTHON.fullmatch(launcher))
    while words:
        word = words.pop(0)
        if python and word == "-m":
            return words[0].split(".")[0] if words else None
        if word.startswith("-"):
            continue
        name = os.path.basename(word)
        if not python and "@" in name[1:]:
            name = name[:name.index("@", 1)]  # `@openai/codex@0.5` is `codex` once the scope went with the path
        for suffix in _SCRIPT_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                return name[:-len(suffix)]
        return name
    return None


# -- loading -------------------------------------------------------------------------------------------------

def _shipped_path() -> Path:
    return Path(__file__).with_name("agents.yaml")


def _twin_path() -> Path:
    return Path(__file__).with_name("agents.json")


def _fingerprint(text: str) -> str:
    """Which text of agents.yaml the twin was made from (zlib: hashlib alone costs 5 ms to import)."""
    import zlib

    data = text.encode("utf-8")
    return f"{len(data)}:{zlib.crc32(data):08x}"


def twin_text(yaml_text: str) -> str:
    """agents.json for `yaml_text`: its document, with the fingerprint of the text it came from."""
    import json

    return json.dumps({"made_from": _fingerprint(yaml_text), "document": _trusted_yaml(yaml_text)},
                      indent=1) + "\n"


def write_twin() -> Path:
    """Write agents.json from agents.yaml as it is now (`python3 -m mam.kinds`, after editing agents.yaml)."""
    path = _twin_path()
    path.write_text(twin_text(_shipped_path().read_text(encoding="utf-8")), encoding="utf-8")
    return path


def _trusted_yaml(text: str) -> object:
    """mam's own YAML, read with libyaml's loader when PyYAML has it (a tenth of the time of the refusing
    loader a user's file goes through; a test checks that both read agents.yaml alike)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # a safe loader


def _twin_document(yaml_text: str) -> object | None:
    """The shipped document from agents.json when that was made from exactly this agents.yaml, else None."""
    import json

    try:
        twin = json.loads(_twin_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(twin, dict) or twin.get("made_from") != _fingerprint(yaml_text):
        return None  # agents.yaml was edited after the twin was made: the YAML is what counts
    return twin.get("document")


@functools.lru_cache(maxsize=1)
def _shipped() -> dict[str, Kind]:
    """The shipped file, parsed once per process. agents.yaml is the source; agents.json beside it is the same
    document as JSON (`python3 -m mam.kinds` writes it; a test checks it is current), read instead when it was
    made from this very text: importing PyYAML and parsing cost 10 ms of every status that reads screens. It is
    mam's own file, not a user's: without the twin it is read by `_trusted_yaml`."""
    path, text, document = _shipped_document()
    return _from_document(path, text, document, {})


def _shipped_document() -> tuple[Path, str, object]:
    """agents.yaml's path, text and document (from its twin when that is current)."""
    path = _shipped_path()
    text = path.read_text(encoding="utf-8")
    document = _twin_document(text)
    return path, text, _trusted_yaml(text) if document is None else document


@functools.lru_cache(maxsize=1)
def agent_programs() -> dict[str, tuple[str, ...]]:
    """The agents `mam spawn --agent NAME` starts by name, each with the argv of its program: every shipped kind
    with programs by its first one, and the shipped `spawn_only` agents (no screen rules of their own). Anything
    else runs with --command. Read from the raw document: listing them compiles no rule."""
    _, _, document = _shipped_document()
    assert isinstance(document, dict)  # mam's own file; a test loads it
    programs: dict[str, tuple[str, ...]] = {name: (fields["programs"][0],)
                                            for name, fields in document["kinds"].items() if fields.get("programs")}
    programs.update({name: (program,) for name, program in (document.get(SPAWN_ONLY) or {}).items()})
    return programs


def load_library(user_file: Path | None) -> Library:
    """The shipped kinds, with `user_file` (a workspace's `.mam/states.yaml`, read only if it exists) laid over
    them: a user rule with a shipped id replaces it in place, new rules are tried before the shipped ones of
    their state, a new kind is added, and `programs`, `session_options` and `resume` given replace the shipped
    ones. A bad file raises MamError("invalid_config", "<file>:<line>: ...")."""
    shipped = _shipped()
    if user_file is None:
        return Library(dict(shipped))
    from mam.util.safefile import read_text

    text = read_text(user_file, user_file, MAX_FILE_BYTES, "invalid_config", _HINT)
    if text is None:
        return Library(dict(shipped))
    return Library(_load_file(user_file, text, shipped))


def _load_file(path: Path, text: str, base: Mapping[str, Kind], trusted: bool = False) -> dict[str, Kind]:
    if trusted:
        document = _trusted_yaml(text)
    else:
        from mam.registry import yamlio

        document = yamlio.load_or_refuse(text, path, "invalid_config", _HINT)
    return _from_document(path, text, document, base)


def _from_document(path: Path, text: str, document: object, base: Mapping[str, Kind]) -> dict[str, Kind]:
    """The kinds of a parsed file laid over `base`; a refusal names the line of `text` it is about. The shipped
    file, the base of all others, may also list the agents mam only starts (agent_programs reads them): no kinds."""
    if not base and isinstance(document, dict):
        document = {key: value for key, value in document.items() if key != SPAWN_ONLY}
    try:
        return _merge(base, _document(document, base))
    except _Invalid as err:
        from mam.registry import yamlio

        line = yamlio.line_of(text, err.where, at_key=err.at_key)
        raise yamlio.refusal("invalid_config", path, line, err.message, _HINT) from None


def _merge(base: Mapping[str, Kind], given: dict[str, dict[str, Any]]) -> dict[str, Kind]:
    kinds = dict(base)
    for name, fields in given.items():
        old = kinds.get(name)
        rules: tuple[Rule, ...] = fields.get("rules", ())
        if old is not None:
            new_ids = {rule.id: rule for rule in rules}
            replaced = tuple(new_ids.pop(rule.id, rule) for rule in old.rules)
            rules = tuple(rule for rule in rules if rule.id in new_ids) + replaced
        kinds[name] = Kind(
            name,
            fields.get("programs", old.programs if old else ()),
            fields.get("session_options", old.session_options if old else ()),
            fields.get("resume", old.resume if old else None),
            rules,
            fields.get("new_session", old.new_session if old else None),
        )
    return kinds


def _document(data: object, base: Mapping[str, Kind]) -> dict[str, dict[str, Any]]:
    from mam.registry import yamlio  # the file was parsed with it: already loaded

    if not isinstance(data, dict):
        raise _Invalid(f"the top level must be a mapping with schema: 1 and kinds:, got {type(data).__name__}")
    yamlio.refuse_unknown_keys(data, TOP_KEYS, error=_Invalid)
    if data.get("schema") != 1 or isinstance(data.get("schema"), bool):
        raise _Invalid("schema must be 1", "schema")
    kinds = data.get("kinds")
    if not isinstance(kinds, dict):
        raise _Invalid("kinds must be a mapping of kind names", "kinds")
    seen: dict[str, str] = {}
    out: dict[str, dict[str, Any]] = {}
    for name, fields in kinds.items():
        if not isinstance(name, str) or not _KIND_NAME.fullmatch(name):
            raise _Invalid(f"kind name {shown(name, 40)} must be lowercase letters, digits, - or _", "kinds",
                           str(name), at_key=True)
        out[name] = _kind(name, fields, seen)
    return out


def _kind(name: str, fields: object, seen: dict[str, str]) -> dict[str, Any]:
    where = ("kinds", name)
    if not isinstance(fields, dict):
        raise _Invalid(f"kinds.{name} must be a mapping", *where)
    from mam.registry import yamlio

    yamlio.refuse_unknown_keys(fields, KIND_KEYS, *where, error=_Invalid)
    out: dict[str, Any] = {}
    if "programs" in fields:
        out["programs"] = _words(fields["programs"], f"kinds.{name}.programs", "program basenames",
                                 lambda w: "/" not in w and not w.startswith("-"), *where, "programs")
    if "session_options" in fields:
        out["session_options"] = _words(fields["session_options"], f"kinds.{name}.session_options",
                                        "options such as --session-id", _OPTION.fullmatch, *where,
                                        "session_options")
    if "resume" in fields:
        out["resume"] = _resume(fields["resume"], name, (*where, "resume"))
    if "new_session" in fields:
        words = _words(fields["new_session"], f"kinds.{name}.new_session", "words (with {session})",
                       lambda w: True, *where, "new_session")
        if words.count("{session}") != 1 or any("{" in w and w != "{session}" for w in words):
            raise _Invalid(f"kinds.{name}.new_session must hold {{session}} once, as a whole word, and no other "
                           "placeholder", *where, "new_session")
        out["new_session"] = words
    if "rules" in fields:
        rules = fields["rules"]
        if not isinstance(rules, list):
            raise _Invalid(f"kinds.{name}.rules must be a list", *where, "rules")
        out["rules"] = tuple(_rule(name, rule, (*where, "rules", i), seen) for i, rule in enumerate(rules))
    return out


def _words(value: object, label: str, what: str, ok: Any, *where: str | int) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _Invalid(f"{label} must be a list of {what}", *where)
    for index, word in enumerate(value):
        if not isinstance(word, str) or not word or not ok(word):
            raise _Invalid(f"{label}: {shown(word, 40)} is not one of the {what}", *where, index)
    return tuple(value)


def _resume(value: object, kind: str, where: tuple[str | int, ...]) -> tuple[str, ...]:
    words = _words(value, f"kinds.{kind}.resume", "words (with {session} and {args})", lambda w: True, *where)
    for index, word in enumerate(words):
        if "{" in word and word not in ("{args}", "{session}"):
            raise _Invalid(f"kinds.{kind}.resume: {shown(word, 40)}: only {{args}} and {{session}} are placeholders, "
                           "as whole words", *where, index)
    if words.count("{session}") != 1 or words.count("{args}") > 1:
        raise _Invalid(f"kinds.{kind}.resume must hold {{session}} once and {{args}} at most once", *where)
    return words


def _rule(kind: str, rule: object, where: tuple[str | int, ...], seen: dict[str, str]) -> Rule:
    if not isinstance(rule, dict):
        raise _Invalid(f"a rule of kinds.{kind} must be a mapping with id, state, pattern and lines", *where)
    from mam.registry import yamlio

    yamlio.refuse_unknown_keys(rule, RULE_KEYS + OPTIONAL_RULE_KEYS, *where, error=_Invalid)
    missing = [key for key in RULE_KEYS if key not in rule]
    if missing:
        raise _Invalid(f"rule is missing {', '.join(missing)}", *where)
    rule_id, state, pattern, lines = (rule[key] for key in RULE_KEYS)
    at = rule.get("at", "bottom")
    prefix, dot, rest = rule_id.partition(".") if isinstance(rule_id, str) else ("", "", "")
    if prefix != kind or not dot or not _RULE_ID.fullmatch(rest):
        raise _Invalid(f"rule id {shown(rule_id, 40)} must be {kind}.NAME (lowercase letters, digits, - or _)",
                       *where, "id")
    if rule_id in seen:
        raise _Invalid(f"duplicate rule id {rule_id}", *where, "id")
    seen[rule_id] = kind
    if state not in RULE_STATES:
        raise _Invalid(f"rule {rule_id}: state must be {', '.join(RULE_STATES)}, got {shown(state, 40)}",
                       *where, "state")
    if isinstance(lines, bool) or not isinstance(lines, int) or not 1 <= lines <= MAX_LINES:
        raise _Invalid(f"rule {rule_id}: lines must be a whole number from 1 to {MAX_LINES}, got {shown(lines, 40)}",
                       *where, "lines")
    if at not in RULE_PLACES:
        raise _Invalid(f"rule {rule_id}: at must be {' or '.join(RULE_PLACES)}, got {shown(at, 40)}", *where, "at")
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN:
        raise _Invalid(f"rule {rule_id}: pattern must be a regular expression of 1 to {MAX_PATTERN} characters",
                       *where, "pattern")
    try:
        regex = re.compile(pattern, re.IGNORECASE)
    except (re.error, RecursionError, OverflowError) as exc:
        raise _Invalid(f"rule {rule_id}: pattern does not compile: {exc}", *where, "pattern") from None
    if regex.search(""):
        # It would match every screen, blank lines included: never what a rule means.
        raise _Invalid(f"rule {rule_id}: pattern matches an empty line", *where, "pattern")
    why = backtracking(pattern)
    if why is not None:
        raise _Invalid(f"rule {rule_id}: pattern can backtrack without bound: {why} (see docs/states.md, "
                       "\"Patterns\")", *where, "pattern")
    return Rule(rule_id, state, pattern, lines, regex, at)


# -- patterns that backtrack without bound --------------------------------------------------------------------
# Python's `re` backtracks: `^(a+)+$` takes twice as long for each `a` more on a line that does not match. The
# cause is a repetition whose body can match one text in many ways, tried again by each way of the repetition
# around it. Refused: a repetition that may run 3 or more times holding one that may run more than once, and
# such a repetition over alternatives that can begin with one character ((a|ab)+). A possessive repetition
# (x++) never gives back what it took, so it is never the cause. What this misses (a polynomial `.*a.*a.*b`
# on a long line) is stopped by the time limit on reading a screen (mam.kinds.classify).

_MANY = 3  # a repetition that may run this often or more multiplies the ways its body matches


def backtracking(pattern: str) -> str | None:
    """Why `pattern` can backtrack without bound, or None (also when it cannot be parsed here: it compiled, and
    the time limit still holds)."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        tree = _parser.parse(pattern, re.IGNORECASE)
    except Exception:
        return None
    return _nested(list(tree), False)


def _nested(items: list[tuple[Any, Any]], repeated: bool) -> str | None:
    from re import _constants as op  # type: ignore[attr-defined]

    for code, value in items:
        if code in (op.MAX_REPEAT, op.MIN_REPEAT):
            low, high, body = value
            if repeated and high > 1 and high != low:
                return "a repetition inside a repetition, like (x+)+"
            found = _nested(list(body), repeated or high >= _MANY)
        elif code is op.POSSESSIVE_REPEAT:
            found = _nested(list(value[2]), False)
        elif code is op.BRANCH:
            if repeated and _may_overlap(value[1]):
                return "repeated alternatives that begin alike, like (a|ab)+"
            found = next((why for branch in value[1] if (why := _nested(list(branch), repeated))), None)
        elif code is op.SUBPATTERN:
            found = _nested(list(value[3]), repeated)
        elif code is op.ATOMIC_GROUP:
            found = _nested(list(value), repeated)
        elif code in (op.ASSERT, op.ASSERT_NOT):
            found = _nested(list(value[1]), repeated)
        elif code is op.GROUPREF_EXISTS:
            found = _nested(list(value[1]), repeated) or (_nested(list(value[2]), repeated) if value[2] else None)
        else:
            found = None
        if found:
            return found
    return None


def _may_overlap(branches: list[Any]) -> bool:
    """True unless each branch begins with a known character no other branch begins with."""
    seen: set[str] = set()
    for branch in branches:
        first = _first_chars(list(branch))
        if first is None or first & seen:
            return True
        seen |= first
    return False


def _first_chars(items: list[tuple[Any, Any]]) -> set[str] | None:
    """The characters (lower case) a match of `items` can begin with, when they are few and known; else None."""
    from re import _constants as op  # type: ignore[attr-defined]

    if not items:
        return None  # an empty branch matches anywhere
    code, value = items[0]
    if code is op.LITERAL:
        return {chr(value).lower()}
    if code is op.IN:
        out: set[str] = set()
        for kind, item in value:
            if kind is op.LITERAL:
                out.add(chr(item).lower())
            elif kind is op.RANGE and item[1] - item[0] < 256:
                out |= {chr(c).lower() for c in range(item[0], item[1] + 1)}
            else:
                return None
        return out
    if code is op.SUBPATTERN:
        return _first_chars(list(value[3]))
    if code in (op.MAX_REPEAT, op.MIN_REPEAT, op.POSSESSIVE_REPEAT) and value[0] >= 1:
        return _first_chars(list(value[2]))
    return None


