"""Reading an agent's state from the visible text of its pane, with the rules of the kind library.

The text is hostile: it is whatever the agent (or anything it ran) drew. It is only matched, never run, and
the one line a verdict quotes is cut and cleaned of control characters before anyone prints it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from mam.kinds.library import RULE_STATES, Library, Rule

MAX_TEXT = 256 * 1024  # a screen is a few kilobytes; only the end of anything larger is read
MAX_LINE = 1000  # a line is cut before matching, so no rule scans an unbounded line
MAX_QUOTE = 200
GENERIC = "generic"
SCREEN_TIMEOUT_VAR = "MAM_SCREEN_TIMEOUT"  # seconds the rules may take to read one screen (docs/states.md)
SCREEN_TIMEOUT = 1.0
LOST = "(reader)"  # the `overtime` of a screen whose reading process did not answer in time (mam.kinds.worker)

# OSC, DCS, SOS, PM and APC strings up to their terminator (BEL or ESC \), or to the end when unterminated;
# then CSI sequences; then the other two- and three-byte escapes (charset selection, keypad modes).
_ESCAPES = re.compile(
    r"\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\|$)"
    r"|\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[ -/]*[0-~]"
    r"|[\x9b][0-?]*[ -/]*[@-~]|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c|\x1b\\|$)"
)
# Controls and format characters (bidi overrides, zero-width joiners), line and paragraph separators, lone
# surrogates: a terminal draws none of them as a character of its own.
_INVISIBLE = ("Cc", "Cf", "Zl", "Zp", "Cs")
# What a quoted line loses besides: private-use and unassigned code points, and the Hangul fillers (letters that
# show as blanks), so no hidden text rides along in the evidence (docs/trust.md).
_UNQUOTED = frozenset((*_INVISIBLE, "Co", "Cn"))
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0")
# Marks that draw nothing in other categories: variation selectors (one hidden byte each), the combining grapheme
# joiner, the Khmer inherent vowels, the braille blank (mam/util/render.py escapes the same).
_MARKS = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef\u034f\u17b4\u17b5\u2800]")


# Erase in line (CSI K, 0K, 2K) is kept, as one of these two characters, for `_overwrite` to apply: a TUI
# redraws a line with "\r", the erase and the new text, and a longer old text must not show through.
_ERASE_END, _ERASE_LINE = "\x00", "\x01"


def _erase_or_nothing(match: re.Match[str]) -> str:
    escape = match.group()
    if escape in ("\x1b[K", "\x1b[0K"):
        return _ERASE_END
    return _ERASE_LINE if escape == "\x1b[2K" else ""


@dataclass(frozen=True)
class Verdict:
    state: str  # working, blocked, idle or unknown
    rule: str | None  # the id of the rule that matched
    line: str | None  # the screen line it matched, cut and cleaned
    overtime: str | None = None  # the rule that was still running when the time limit ended the reading

    def as_json(self) -> dict[str, str | None]:
        return {"rule": self.rule, "line": self.line}


UNKNOWN = Verdict("unknown", None, None)


def screen_lines(text: str) -> list[str]:
    """The lines a terminal would show for `text`: escapes stripped, each `\\r` returning to the start of its
    line and each backspace stepping back (later characters overwrite), erase-in-line applied, trailing blank
    lines dropped. Cursor movement is not followed: `text` should be a rendered screen (tmux capture-pane,
    with or without -e), not a raw output stream."""
    lines = _rows(text)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _rows(text: str) -> list[str]:
    """Every row of `text` as screen_lines renders it, blank rows at the bottom kept (the cursor is counted from
    the bottom row); the newline that ends the last row does not make one more."""
    text = text[-MAX_TEXT:].replace(_ERASE_END, "").replace(_ERASE_LINE, "")
    text = _ESCAPES.sub(_erase_or_nothing, text)
    raw = text.split("\n")
    if len(raw) > 1 and raw[-1] == "":
        raw.pop()
    return [_overwrite(row) for row in raw]


def _overwrite(raw: str) -> str:
    if raw.isprintable():
        return raw.rstrip()
    cells: list[str] = []
    at = 0
    for ch in raw:
        if ch == "\r":
            at = 0
        elif ch == "\b":
            at = max(0, at - 1)
        elif ch == _ERASE_END:
            del cells[at:]
        elif ch == _ERASE_LINE:
            cells = [" "] * min(at, len(cells))
        elif ch == "\t" or unicodedata.category(ch) not in _INVISIBLE:
            ch = " " if ch == "\t" or unicodedata.category(ch) == "Zs" else ch
            if at < len(cells):
                cells[at] = ch
            else:
                cells.append(ch)
            at += 1
        # any other control character draws nothing
    return "".join(cells).rstrip()


def classify_screen(library: Library, kind: str | None, text: str, budget: float | None = None,
                    below_cursor: int | None = None) -> Verdict:
    """The state `text` (a pane's visible screen) shows for an agent of `kind`: the first rule that matches, in
    rank order blocked, working, idle, each rule reading only the live part of the screen it is about (its
    `at`: the last `lines` non-empty lines, or the live block at the cursor; docs/states.md). A kind the
    library does not know is read with the `generic` rules. No match is `unknown`: mam never guesses.

    `below_cursor` is how many rows of `text` lie under the cursor's row, when the backend knows where the
    cursor is (and it is shown); None: the last non-empty line stands for the cursor's.

    With `budget`, the reading ends after that many seconds: the verdict is then `unknown`, with the rule that
    was running as `overtime`. Python's `re` has no time limit of its own, and a pattern can backtrack for hours
    on a line of 40 characters; the library refuses the patterns known to (library.py), and this limit stops
    those it cannot know. The limit is a timer signal, which Python delivers to the main thread only, and `re`
    holds the GIL while it matches: off the main thread, call mam.kinds.reading.read_screen, which has a child
    process apply the same limit on its own main thread (mam.kinds.worker)."""
    entry = library.kinds.get(kind) if kind else None
    if entry is None:
        entry = library.kinds.get(GENERIC)
    if entry is None or not entry.rules:
        return UNKNOWN
    running: list[str] = []
    try:
        with _time_limit(budget):
            return _classify(entry.rules, text, running, below_cursor)
    except _Overtime:
        return Verdict("unknown", None, None, running[-1] if running else "(none)")


def _classify(rules: tuple[Rule, ...], text: str, running: list[str], below_cursor: int | None) -> Verdict:
    rows = [row[:MAX_LINE] for row in _rows(text)]
    filled = [row for row in rows if row.strip()]
    block: list[str] | None = None  # the live block at the cursor, made once, when a rule reads it
    for state in RULE_STATES:
        for rule in rules:
            if rule.state == state:
                running.append(rule.id)
                if rule.at == "cursor":
                    if block is None:
                        block = cursor_block(rows, below_cursor)
                    window = block[-rule.lines:]
                else:
                    window = filled[-rule.lines:]
                line = _match(rule, window)
                if line is not None:
                    return Verdict(state, rule.id, quote(line))
    return UNKNOWN


def cursor_block(rows: list[str], below_cursor: int | None) -> list[str]:
    """The live block at the cursor, top to bottom: the cursor's row (the nearest non-blank row above it when it
    is blank: a program that printed its question and a newline waits on the next row), and the rows right
    above it up to the first blank one. Without a cursor (or one outside `rows`), the last non-blank row
    stands for the cursor's. A question that was answered is not in it once the program printed anything
    after it."""
    at = len(rows) - 1 - below_cursor if below_cursor is not None else len(rows) - 1
    if not 0 <= at < len(rows):
        at = len(rows) - 1
    while at >= 0 and not rows[at].strip():
        at -= 1
    top = at
    while top > 0 and rows[top - 1].strip():
        top -= 1
    return rows[top:at + 1] if at >= 0 else []


class _Overtime(Exception):
    pass


def _overtime(signum: int, frame: object) -> None:
    raise _Overtime


# True inside `time_limits`, whose SIGALRM handler raises _Overtime (set and read in the main thread only).
_handler_set = False


@contextmanager
def time_limits() -> Iterator[None]:
    """Around the readings of many screens in the main thread: SIGALRM's handler is set once for them all, and
    each reading only arms its timer. Setting and restoring the handler for every screen cost as much as reading
    a short screen (bench/RESULTS.md)."""
    global _handler_set
    import signal
    import threading

    if _handler_set or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _overtime)
    _handler_set = True
    try:
        yield
    finally:
        _handler_set = False
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def _time_limit(budget: float | None) -> Iterator[None]:
    """Raise _Overtime in the block once `budget` seconds have passed: a real-time timer whose signal handler
    raises. The regex engine checks for signals as it runs, so even a backtracking search is stopped."""
    import signal
    import threading

    if budget is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    with time_limits():
        try:
            signal.setitimer(signal.ITIMER_REAL, budget)
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _match(rule: Rule, window: list[str]) -> str | None:
    """The lowest line of the rule's window that matches: the one nearest the live bottom."""
    for line in reversed(window):
        if rule.regex.search(line):
            return line
    return None


def quote(line: str) -> str:
    """`line` safe to print (`clean`), spaces at the ends trimmed, at most MAX_QUOTE characters."""
    return clean(line).strip()[:MAX_QUOTE]


def clean(text: str) -> str:
    """`text` without what a terminal draws nothing for: control and format characters (bidi overrides,
    zero-width, tag characters), private-use and unassigned code points, the Hangul fillers and the invisible
    marks. The one cleaning of every line mam quotes as evidence: screen lines, titles, an ended pane's last
    lines (docs/trust.md)."""
    return "".join(ch for ch in _MARKS.sub("", text)
                   if unicodedata.category(ch) not in _UNQUOTED and ch not in _FILLERS)
