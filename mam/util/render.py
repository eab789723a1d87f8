"""Readable tables for people. Colour only on a terminal, and never with NO_COLOR set."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

_COLOURS = {"up": "32", "alive": "32", "down": "31", "absent": "31", "unknown": "33", "working": "32",
            "blocked": "35", "done": "36"}


MIN_WIDTH = 6  # a column is never cut narrower than this
WIDE_WIDTH = 16  # long columns give way down to this before short ones are touched
READABLE_WIDTH = 12  # a path or a reason cut narrower tells nobody anything: status leaves other columns out first
ELLIPSIS = "…"


def use_colour() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def terminal_width() -> int | None:
    """The width to fit tables to: the terminal's, or $COLUMNS when set; None (no limit) into a pipe or file,
    so that nothing a program reads from the text is ever cut (programs should read --json anyway)."""
    if os.environ.get("COLUMNS", "").isdigit() or sys.stdout.isatty():
        import shutil

        return max(shutil.get_terminal_size().columns, 20)
    return None


def cut_middle(text: str, width: int) -> str:
    """Shorten `text` to `width` by dropping its middle: a path keeps its root and its last folder."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (width - 1 - head):]


def cut_end(text: str, width: int) -> str:
    """Shorten `text` to `width` by dropping its end: a reason keeps the rule id it starts with."""
    return text if len(text) <= width else text[:width - 1] + ELLIPSIS


def _fit(widths: list[int], limit: int | None, elastic: Sequence[int], last: Sequence[int] = (),
         keep: Mapping[int, int] | None = None) -> list[int]:
    """Narrow the widest of the `elastic` columns (paths, details), one character at a time, until a row fits
    `limit` (two spaces apart): down to WIDE_WIDTH first, then to MIN_WIDTH, never under a column's `keep`; at
    each step the columns of `last` give way only once the others are down to it. Names, states and actions are
    never cut: a row that still does not fit runs past the edge rather than lie about a name."""
    widths = list(widths)
    if limit is None or not elastic:
        return widths
    keep = keep or {}
    groups = [[i for i in elastic if i not in last], [i for i in elastic if i in last]]
    for floor in (WIDE_WIDTH, MIN_WIDTH):
        for group in (g for g in groups if g):
            while _width(widths) > limit:
                narrowable = [i for i in group if widths[i] > max(floor, keep.get(i, 0))]
                if not narrowable:
                    break
                widths[max(narrowable, key=lambda i: widths[i])] -= 1
    return widths


def _width(widths: Sequence[int]) -> int:
    return sum(widths) + 2 * (len(widths) - 1)


def drop_to_fit(headers: tuple[str, ...], rows: list[tuple[Any, ...]], elastic: Sequence[str],
                droppable: Sequence[str], keep: Mapping[str, int] | None = None,
                ) -> tuple[tuple[str, ...], list[tuple[Any, ...]], list[str]]:
    """Leave out the `droppable` columns (by header, in that order) while the table would not fit the terminal
    even with its `elastic` columns narrowed to READABLE_WIDTH (or their `keep`). The headers, the rows and the
    names of the columns left out (for a note)."""
    limit = terminal_width()
    dropped: list[str] = []
    keep = keep or {}
    for name in droppable:
        if limit is None or name not in headers:
            continue
        natural = [max([len(h), *(len(_cell(r[i])) for r in rows)]) for i, h in enumerate(headers)]
        narrowest = [max(min(w, READABLE_WIDTH), keep.get(h, 0)) if h in elastic else w
                     for h, w in zip(headers, natural, strict=True)]
        if _width(narrowest) <= limit:
            break
        at = headers.index(name)
        headers = headers[:at] + headers[at + 1:]
        rows = [row[:at] + row[at + 1:] for row in rows]
        dropped.append(name)
    return headers, rows, dropped


def prose(text: str) -> str:
    """A sentence for people, wrapped at the terminal's width (whole into a pipe)."""
    width = terminal_width()
    if width is None or len(text) <= width:
        return text
    import textwrap

    return textwrap.fill(text, width, subsequent_indent="   ", break_long_words=False, break_on_hyphens=False)


def paint(text: str, colour: bool) -> str:
    code = _COLOURS.get(text)
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code else text


# Control characters (C0, DEL, C1): pane text, paths and option values can carry escape sequences that would
# retitle, clear or reprogram the reader's terminal. And the characters that draw nothing, with which such text
# could disguise itself or carry hidden text to an agent that reads the table: format characters (bidi
# overrides, zero-width marks, the soft hyphen, the tag characters U+E0000-E007F), private-use and unassigned
# code points, surrogates, line and paragraph separators, and the Hangul fillers, letters that show as blanks.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# ASCII text never leaves the fast path. A negated class: `[\x7f-\U0010ffff]` took 3.6 ms to compile, on
# every start.
_MAYBE = re.compile("[^\x20-\x7e]")
_HIDDEN_CATEGORIES = frozenset(("Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"))
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0")
# Characters of other categories that draw nothing: the variation selectors (256 of them carry one hidden byte
# each after any visible character, as tag characters do), the combining grapheme joiner, the Khmer inherent
# vowels and the braille blank.
_INVISIBLE = frozenset("\u034f\u17b4\u17b5\u2800")
_SHOWN = {"\n": "\\n", "\t": " "}


def visible(text: str) -> str:
    """`text` with every control and invisible character written out (`\\x1b`, `\\n`, `\\u00ad`), so it
    prints as one inert line and shows every character it holds."""
    if text.isascii():
        return _CONTROL.sub(_shown, text)
    return _MAYBE.sub(_shown, text)


def is_hidden(ch: str) -> bool:
    """True for a character a terminal draws as nothing (or as a blank that is not a space)."""
    import unicodedata  # a C module, 0.2 ms: only text that is not ASCII pays it

    code = ord(ch)
    return (unicodedata.category(ch) in _HIDDEN_CATEGORIES or ch in _FILLERS or ch in _INVISIBLE
            or 0xfe00 <= code <= 0xfe0f or 0xe0100 <= code <= 0xe01ef)


def _shown(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _SHOWN:
        return _SHOWN[ch]
    return _escape(ord(ch)) if ord(ch) < 0xa0 or is_hidden(ch) else ch


def _escape(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return visible(str(value))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], colour_columns: Sequence[int] = (),
          elastic: Sequence[int] | None = None, last: Sequence[int] = (), keep: Mapping[int, int] | None = None,
          cut_ends: Sequence[int] = ()) -> str:
    """Columns two spaces apart; `elastic` columns (default: the last) give way to the terminal's width, those
    of `last` after the others, none under its `keep`; those of `cut_ends` lose their end, the others their
    middle."""
    cells = [[_cell(v) for v in row] for row in rows]
    natural = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    widths = _fit(natural, terminal_width(), (len(headers) - 1,) if elastic is None else elastic, last, keep)
    cuts = [cut_end if i in cut_ends else cut_middle for i in range(len(widths))]
    cells = [[cut(v, w) for cut, v, w in zip(cuts, row, widths, strict=True)] for row in cells]
    headers = [cut_middle(h, w) for h, w in zip(headers, widths, strict=True)]
    colour = use_colour()
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in cells:
        parts = []
        for i, (value, width) in enumerate(zip(row, widths, strict=True)):
            padded = value.ljust(width)
            parts.append(paint(value, colour) + padded[len(value):] if i in colour_columns else padded)
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _hosted(entries: Sequence[dict[str, Any]]) -> bool:
    """Whether a HOST column is worth its room: only when some entry is on another host."""
    return any(e.get("host") for e in entries)


def _host_after_server(headers: tuple[str, ...], rows: list[tuple[Any, ...]], entries: Sequence[dict[str, Any]],
                       server_at: int) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """HOST inserted after the SERVER column (`server_at`), "local" for this machine's."""
    at = server_at + 1
    return (headers[:at] + ("HOST",) + headers[at:],
            [(*row[:at], e.get("host") or "local", *row[at:]) for row, e in zip(rows, entries, strict=True)])


def servers_table(servers: Sequence[dict[str, Any]]) -> str:
    rows: list[tuple[Any, ...]] = [(s["backend"], s["server"], s["state"], s["agents"],
                                    (s["error"] or {}).get("message")) for s in servers]
    headers: tuple[str, ...] = ("BACKEND", "SERVER", "STATE", "AGENTS", "DETAIL")
    if _hosted(servers):
        headers, rows = _host_after_server(headers, rows, servers, 1)
        return table(headers, rows, colour_columns=(3,))
    return table(headers, rows, colour_columns=(2,))


def _pane(session: dict[str, Any]) -> str | None:
    """An absent agent has no pane: the one its row last knew may be another agent's now (tmux reuses ids)."""
    return None if session["live"] == "absent" else session["pane_id"]


def _sessions_table(sessions: Sequence[dict[str, Any]]) -> list[str]:
    """The sessions as a table, and a note when columns were left out to fit the terminal. STATE only when the
    states were read; WHY only when some agent has something to say (an absent one: why it is not running)."""
    stated = sessions[0].get("state_source") is not None
    headers: tuple[str, ...] = ("NAME", "BACKEND", "SERVER", "STATUS", "LIVE", *(("STATE",) if stated else ()),
                                "AGENT", "PANE", "CWD")
    rows: list[tuple[Any, ...]] = [(s["name"], s["backend"], s["server"], s["status"], s["live"],
                                    *((s["state"],) if stated else ()), s["agent"], _pane(s), s["cwd"])
                                   for s in sessions]
    reasons = [_crash_loop(s) or (why(s) if stated else None) for s in sessions]
    if any(reasons):
        rows = [(*row, reason) for row, reason in zip(rows, reasons, strict=True)]
        headers += ("WHY",)
    if _hosted(sessions):
        headers, rows = _host_after_server(headers, rows, sessions, 2)
    # One backend needs no column to say so; the directory is in --json: both give way to WHY first.
    droppable = (("BACKEND",) if len({s["backend"] for s in sessions}) == 1 else ()) + (
        ("CWD",) if "WHY" in headers else ())
    # A reason is cut at its end, never inside the rule id (or backend field) it starts with.
    whole = {"WHY": max((_rule_width(s, r) for s, r in zip(sessions, reasons, strict=True) if r), default=0)}
    headers, rows, dropped = drop_to_fit(headers, rows, ("CWD", "WHY"), droppable, whole)
    if "WHY" in headers:
        # The reason is what a person reads the table for (COLUMNS=80 cut it first): the directory, the pane id,
        # then the liveness and the registry's word give way before it is cut at all, as far as it needs. With
        # states read, STATE and WHY say both (an agent that is not running says so and why); without, LIVE and
        # STATUS are all the table says of an agent, and stay.
        later = ("CWD", "PANE", *(("LIVE", "STATUS") if stated else ()))
        headers, rows, more = drop_to_fit(headers, rows, (), later)
        dropped += more
    elastic = tuple(headers.index(h) for h in ("CWD", "WHY") if h in headers)
    # The reason gives way after the directory: it is what the STATE column is read with.
    last = (headers.index("WHY"),) if "WHY" in headers else ()
    keep = {headers.index(h): width for h, width in whole.items() if h in headers}
    colour = tuple(headers.index(h) for h in ("LIVE", "STATE") if h in headers)
    lines = [table(headers, rows, colour_columns=colour, elastic=elastic, last=last, keep=keep, cut_ends=last)]
    if dropped:
        lines.append(f"({', '.join(dropped)} left out to fit the terminal: `mam status --json` has them)")
    return lines


def work_text(state: dict[str, Any]) -> str:
    """The state of a worktree's work in words (mam status, mam worktree list): unread is never clean."""
    if state.get("state") in ("clean", "dirty"):
        pushed = "no upstream" if state.get("upstream") is None else f"{state.get('unpushed')} unpushed"
        ahead = state.get("ahead")
        since = f", {ahead} commit(s) since its base" if isinstance(ahead, int) else ""
        return f"{state['state']}, {state.get('uncommitted')} uncommitted file(s){since}, {pushed}"
    return str(state.get("state")) + (f" ({state['why']})" if state.get("why") else "")


def work_brief(state: dict[str, Any]) -> str:
    """The same for a column (mam top's WORK): `mam/x 2 changed +3 1 unpushed`; unread is never clean."""
    branch = str(state.get("branch") or "?")
    if state.get("state") not in ("clean", "dirty"):
        return f"{branch} {state.get('state')}"
    parts = [branch, f"{state.get('uncommitted')} changed" if state.get("uncommitted") else "clean"]
    if isinstance(state.get("ahead"), int) and state["ahead"]:
        parts.append(f"+{state['ahead']}")
    if state.get("upstream") is not None and state.get("unpushed"):
        parts.append(f"{state['unpushed']} unpushed")
    return " ".join(parts)


def status_text(doc: dict[str, Any], servers: Sequence[str] = (), host: str | None = None) -> str:
    parts = [f"workspace {visible(doc['workspace'])}"]  # a directory's name may hold escape sequences
    sessions = doc["sessions"]
    if sessions:
        parts.extend(_sessions_table(sessions))
        worked = [s for s in sessions if s.get("worktree")]
        if worked:  # below the table: its columns stay as they are
            parts.append("")
            parts.extend(visible(f"{s['name']}: worktree on {s['worktree'].get('branch')}: "
                                 f"{work_text(s['worktree'])}") for s in worked)
    elif doc.get("state_filter"):
        parts.append(f"no agent is {' or '.join(doc['state_filter'])}")
    elif servers:
        on = ", ".join(servers)
        there = f" of host {host}" if host else ""
        parts.append(visible(f"no agents registered on server{'s' if len(servers) > 1 else ''} {on}{there} in "
                             f"{doc['registry']}"))
    else:
        parts.append(f"no agents registered in {visible(doc['registry'])}")
    if doc["servers"]:
        parts.append("")
        parts.append(servers_table(doc["servers"]))
    return "\n".join(parts)


def _crash_loop(session: dict[str, Any]) -> str | None:
    """An agent whose automatic restores stopped at a crash loop, with the last line it printed (not while it
    runs again: a restore by hand ends the loop)."""
    if not session.get("crash_loop") or session.get("live") == "alive":
        return None
    lines = session.get("last_output") or []
    return "crash loop" + (f": {lines[-1]}" if lines else "")


def why(session: dict[str, Any]) -> str | None:
    """The evidence of a session's state, short: the backend's field, or the rule (and any fact) that decided."""
    evidence = session.get("evidence") or {}
    if "field" in evidence:  # with why a hook report was set aside, when one was
        return f"{evidence['field']}={evidence['value']}" + (f": {evidence['fact']}" if evidence.get("fact") else "")
    parts = [str(evidence[key]) for key in ("rule", "fact") if evidence.get(key)]
    return ": ".join(parts) or None


def _rule_width(session: dict[str, Any], reason: str) -> int:
    """How much of `reason` (why(session)) is never cut: the backend's field, or the rule id and, when a fact
    follows, room for the ellipsis after it."""
    evidence = session.get("evidence") or {}
    if "field" in evidence:
        return len(visible(f"{evidence['field']}={evidence['value']}"))
    rule = evidence.get("rule")
    if not rule:
        return 0
    head = len(visible(str(rule)))
    return head + (1 if len(visible(reason)) > head else 0)


def state_text(session: dict[str, Any]) -> str:
    """One agent's state and its evidence on one line (mam wait), the screen line quoted as it matched."""
    evidence = session.get("evidence") or {}
    state, end, reason = session["state"], session.get("end"), why(session)
    if state == "unknown" and end and reason and reason.startswith(f"{end}: "):
        # Its screen is gone and its end explains it (statusview.add_ends' fact): `fin: finished (fin exited with
        # status 0 ...)`, not `fin: unknown (finished: ...)`.
        state, reason = end, reason[len(end) + 2:]
    text = f"{session['name']}: {state}"
    if reason:
        text += f" ({reason})"
    if evidence.get("line"):
        text += f": {evidence['line']!r}"
    return visible(text)


DRIFT_MEANING = {
    "A": "A: registered starting/running, but its server is down or up without it; --apply marks it terminated "
         "(`mam prune` then removes such rows)",
    "B": "B: live on a server but not registered; --apply --adopt registers the named ones",
    "C": "C: registered stopped/terminated, but alive; --apply marks it running",
    "D": "D: alive, and its server reports a resumable session the row does not hold; --apply records it for "
         "`mam restore`",
}


def reconcile_text(doc: dict[str, Any]) -> str:
    """The reconcile report, then what --restore did (when it was asked), one line per agent."""
    text = _drift_report(doc)
    if doc.get("restore") is None:
        return text
    lines = [visible(f"restore {_restore_outcome(a)}" + _untrusted_inline(a)) for a in doc["restore"]["agents"]]
    return "\n".join([text, *(lines or ["restore: nothing to restore"])])


def _unconfirmed(key: str) -> str:
    """`NAME|SERVER[@HOST]` (the --json key) as every other line names an agent: `NAME (server SERVER on HOST)`."""
    name, _, where = key.partition("|")
    server, _, host = where.partition("@")
    return f"{name} (server {server}{f' on {host}' if host else ''})"


def _drift_report(doc: dict[str, Any]) -> str:
    parts = [f"workspace {visible(doc['workspace'])}"]  # a directory's name may hold escape sequences
    if doc["servers"]:
        parts.append(servers_table(doc["servers"]))
    if doc["drifts"]:
        rows = [(d["class"], d["name"], d["backend"], d["server"], d["status"], d["live"], d["action"])
                for d in doc["drifts"]]
        parts.append("")
        parts.append(table(("DRIFT", "NAME", "BACKEND", "SERVER", "STATUS", "LIVE", "ACTION"), rows, elastic=()))
        parts.extend(prose(DRIFT_MEANING[c]) for c in sorted({d["class"] for d in doc["drifts"]}))
    elif not doc["servers"]:
        parts.append("no drift: no agent is registered here, so no server was asked")
    elif doc["confirmed"]:
        parts.append("no drift: the registry matches what the servers say")
    else:
        parts.append("no drift among the rows whose server answered; the others are unconfirmed")
    if doc["unconfirmed"]:
        parts.append(visible(f"unconfirmed (their server could not be asked, so mam says nothing of them): "
                             f"{', '.join(_unconfirmed(u) for u in doc['unconfirmed'])}"))
    # Rows to fix (a row both C and D is one), as `written` counts them.
    fixes = len({(d["class"] == "B", d["backend"], d["server"], d["host"], d["name"]) for d in doc["drifts"]
                 if d["action"] != "report"})
    if not doc["applied"]:
        if fixes:
            parts.append("nothing written; run with --apply to fix")
        return "\n".join(parts)
    written = doc["written"]
    if written:  # only what really reached the file is called applied
        parts.append(f"fixes applied to {visible(doc['registry'])} ({written} row{'s' if written != 1 else ''})")
    if fixes > written:
        parts.append(f"left {fixes - written} row{'s' if fixes - written != 1 else ''} alone: changed since "
                     "the servers were asked; run `mam reconcile` again")
    elif not written and doc["drifts"]:
        parts.append("nothing written: no drift that --apply can fix")
    return "\n".join(parts)


def restore_text(doc: dict[str, Any], dry_run: bool) -> str:
    """`mam restore`: each agent, where it is, what became of it, and in a plan the command it would get."""
    return "\n".join(_restore_lines(a, dry_run) for a in doc["agents"]) or "nothing to restore"


def _restore_outcome(agent: dict[str, Any], on: str = "") -> str:
    return (f"{agent['name']} ({agent['backend']} server {agent['server']}{on}): "
            f"{agent['outcome'].replace('_', ' ')}: {agent['message']}")


def _restore_lines(agent: dict[str, Any], dry_run: bool) -> str:
    """One agent of a restore: where, what became of it, and in a plan the command it would get (its argv,
    quoted as a shell would need it)."""
    import shlex

    line = visible(_restore_outcome(agent, f" on {agent['host']}" if agent.get("host") else ""))
    untrusted = agent["outcome"] == "untrusted"
    shown = dry_run or untrusted  # what the user is asked to trust is always shown
    line += f"\n  argv: {visible(shlex.join(agent['argv']))}" if shown and agent.get("argv") else ""
    # where it would run is part of what is trusted (an edited `cwd` alone makes a spec untrusted)
    line += f"\n  cwd: {visible(str(agent['cwd']))}" if untrusted and agent.get("cwd") else ""
    return line + (f"\n  env: {visible(', '.join(agent['env_names']))}" if shown and agent["env_names"] else "")


def _untrusted_inline(agent: dict[str, Any]) -> str:
    """What a spec left unrun for want of consent would run, on its one line: its argv and the variables it
    would get."""
    if agent["outcome"] != "untrusted" or not agent["argv"]:
        return ""
    import shlex

    env = f"; env: {', '.join(agent['env_names'])}" if agent["env_names"] else ""
    return f" (argv: {shlex.join(agent['argv'])}{env})"


def ls_text(doc: dict[str, Any]) -> str:
    server = doc["server"]
    head = servers_table([server])
    if not doc["agents"]:
        return head
    rows = [(a["name"], a["agent"], a["state"], a["pane_id"], a["cwd"]) for a in doc["agents"]]
    text = head + "\n\n" + table(("NAME", "AGENT", "STATE", "PANE", "CWD"), rows)
    worked = doc.get("worktrees") or {}
    if worked:  # below the table, as mam status says them
        text += "\n" + "".join(visible(f"\n{name}: worktree on {w.get('branch')}: {work_text(w)}")
                               for name, w in worked.items())
    return text


def backends_text(doc: dict[str, Any]) -> str:
    supported = {True: "yes", False: "no", None: None}
    rows = [(("* " if b["default"] else "  ") + b["name"], b["provider"], b["binary"] or "not found",
             b["version"], supported[b.get("supported")], b["error"]) for b in doc["backends"]]
    text = table(("  NAME", "PROVIDER", "BINARY", "VERSION", "SUPPORTED", "ERROR"), rows, elastic=(1, 2, 5))
    return text + operations_text(doc["backends"]) + plugins_text(doc.get("plugins") or [])


def operations_text(backends: list[dict[str, Any]]) -> str:
    """The optional operations each loaded backend declares, and those it leaves out."""
    rows = [(b["name"], ", ".join(b["operations"]) or "-", ", ".join(b["left_out"]) or "-")
            for b in backends if not b["error"]]
    if not rows:
        return ""
    return "\n\n" + table(("BACKEND", "OPERATIONS", "LEFT OUT"), rows, elastic=(1, 2))


def plugins_text(plugins: list[dict[str, Any]]) -> str:
    """The plugins that declare no backend (classifiers, wrappers), with the hooks each implements."""
    if not plugins:
        return ""
    rows = [(p["name"], p["provider"], ", ".join(p["hooks"]) or "-") for p in plugins]
    return "\n\n" + table(("PLUGIN", "PROVIDER", "HOOKS"), rows, elastic=(2,))


def env_text(doc: dict[str, Any]) -> str:
    lines = [f"a server bootstrap would get {doc['variables']} variables"]
    if doc["removed"]:
        lines.append(table(("REMOVED", "RULE", "SOURCE"),
                           [(d["name"], d["rule"], d["source"]) for d in doc["removed"]]))
    else:
        lines.append("nothing to remove")
    refused = [d for d in doc["removed"] if d["not_kept_by"] is not None]
    for d in refused:  # a workspace's keep that matched, and may not keep a marker
        lines.append(visible(f"{d['name']}: not kept by {d['not_kept_by']} ({d['not_kept_source']}): a workspace's "
                             "keep never keeps a marker (it may name a CLAUDE_CODE_* setting in full); your own "
                             "config ($XDG_CONFIG_HOME/mam/config.yaml) may"))
    if doc["kept"]:
        lines.append("")
        lines.append(table(("KEPT", "MATCHED", "KEPT BY", "SOURCE"),
                           [(d["name"], d["rule"], d["kept_by"], d["kept_source"]) for d in doc["kept"]]))
    return "\n".join(lines)



def kinds_text(doc: dict[str, Any]) -> str:
    """One kind a line: its programs, how many screen rules read its state, the command line that resumes it
    and the options that start it with a session id mam chose (`-`: restore starts it afresh). NEW SESSION is
    left out first where the terminal is too narrow (a command line cut short tells nobody anything)."""
    headers: tuple[str, ...] = ("KIND", "PROGRAMS", "RULES", "RESUME", "NEW SESSION")
    rows: list[tuple[Any, ...]] = []
    for kind in doc["kinds"]:
        program = kind["programs"][0] if kind["programs"] else "PROGRAM"
        rows.append((kind["name"], ", ".join(kind["programs"]) or None, len(kind["rules"]),
                     " ".join([program, *kind["resume"]]) if kind["resume"] is not None else None,
                     " ".join(kind["new_session"]) if kind["new_session"] is not None else None))
    limit = terminal_width()
    natural = [max([len(h), *(len(_cell(r[i])) for r in rows)]) for i, h in enumerate(headers)]
    note = []
    if limit is not None and _width(natural) > limit:
        headers, rows = headers[:-1], [row[:-1] for row in rows]
        note.append("(NEW SESSION left out to fit the terminal: `mam kinds --json` has it)")
    lines = [table(headers, rows, elastic=(1, 3), cut_ends=(1, 3)), *note]
    if doc["states_file"]:
        lines.append(f"with {visible(doc['states_file'])} laid over the shipped kinds")
    return "\n".join(lines)
