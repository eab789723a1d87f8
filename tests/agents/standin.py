#!/usr/bin/env python3
"""A stand-in coding agent: draws what an agent's TUI shows in one state, then stays alive.

    python3 tests/agents/standin.py KIND STATE [--then STATE2 --after SECONDS] [--hook COMMAND] [--title TEXT]

KIND is claude, codex, gemini, opencode, grok, hermes, aider, cursor or generic; STATE is working, blocked,
idle or garbage (text no rule matches), or `ask` (generic and aider only): a line-mode question asked as a
program asks it, echo on; once a line is typed, five more lines and the program's prompt, then it stays.
`working` redraws every 0.2 s with the next spinner frame, so the pane keeps changing. Each line typed into it
is shown as "got: <line>" above the drawing (terminal echo is off, so typing does not disturb the bottom of
the screen). Colours and "\\r" overwrites are drawn as the real TUIs draw them, so a reader has to strip and
resolve them. Tests import `screen(kind, state)` by path.
"""

from __future__ import annotations

import argparse
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

RULE = "─" * 60
CLEAR = "\x1b[H\x1b[2J"
BRAILLE = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def _c(code: str, text: str) -> str:
    return f"\x1b[{code}m{text}\x1b[0m"


def _redrawn(old: str, new: str) -> str:
    """A line a TUI rewrote in place: the old frame, a carriage return, erase-line, the new frame."""
    return f"{old}\r\x1b[2K{new}"


def _claude(state: str, frame: int) -> list[str]:
    if state == "working":
        glyphs = "·✢✳✶✻✽"
        old = "✢ Thinking about the whole queue layout… (0s)"
        return [_c("1", "●") + " I'll look at the queue first.", "  ⎿  Read 120 lines", "",
                _redrawn(old, _c("38;5;174", glyphs[frame % len(glyphs)]) + " Simplifying recompute_tangents… "
                         + _c("2", f"({2 + frame}m 18s · ↓ 4.8k tokens)")),
                "", _c("2", RULE), "❯ ", _c("2", RULE),
                _c("2", "  ⏵⏵ bypass permissions on · esc to interrupt · ctrl+t to show tasks")]
    if state == "blocked":
        return [_c("1", "●") + " I'll remove the build folder.", "",
                _c("1;34", " Bash command"), "", "   rm -rf build", "   Remove the old build output", "",
                " Do you want to proceed?", _c("36", " ❯ 1. Yes"),
                "   2. Yes, allow reading from Links\\ from this project",
                "   3. No, and tell Claude what to do differently " + _c("2", "(esc)"), "",
                _c("2", " Esc to cancel · Tab to amend · ctrl+e to explain")]
    if state == "idle":
        return [_c("1", "●") + " Done. The tests pass.", "", _c("2", "✻ Worked for 1m 52s"), "",
                _c("2", RULE), "❯ ", _c("2", RULE), _c("2", "  ? for shortcuts")]
    raise KeyError(state)


def _codex(state: str, frame: int) -> list[str]:
    footer = _c("2", "  gpt-5.6-sol default · /work")
    if state == "working":
        bullet = "•" if frame % 2 == 0 else "◦"
        return ["• Ran pytest -q", "  └ 12 passed", "",
                _redrawn("• Working (0s)",
                         _c("1", bullet) + " Working " + _c("2", f"({4 + frame}s • esc to interrupt)")),
                "", _c("1", "› ") + _c("2", "Ask Codex to do anything"), "", footer]
    if state == "blocked":
        return ["• I need to run the end-to-end tests.", "",
                _c("1", "Would you like to run the following command?"), "",
                "  $ npm run test:e2e", "", _c("36", "› 1. Yes, proceed (y)"),
                "  2. Yes, and don't ask again for commands that start with `npm run test:e2e` (p)",
                "  3. No, and tell Codex what to do differently (esc)", "",
                _c("2", "  Press enter to confirm or esc to cancel")]
    if state == "idle":
        return ["• Edited queue.py (+3 -1)", _c("2", "─ Worked for 1m 52s " + "─" * 40), "",
                _c("1", "› ") + _c("2", "Use /skills to list available skills"), "", footer]
    raise KeyError(state)


def _gemini(state: str, frame: int) -> list[str]:
    box = [_c("2", "╭" + "─" * 58 + "╮"), _c("2", "│") + " >   " + _c("2", "Type your message or @path/to/file")
           + " " * 19 + _c("2", "│"), _c("2", "╰" + "─" * 58 + "╯"), _c("2", " ~/work   no sandbox   gemini-2.5-pro")]
    if state == "working":
        spin = BRAILLE[frame % len(BRAILLE)]
        return ["✦ I'll search the code for the queue.", "",
                _c("35", spin) + " Reticulating splines… " + _c("2", f"(esc to cancel, {5 + frame}s)"), "", *box]
    if state == "blocked":
        return [_c("33", "╭" + "─" * 58 + "╮"), "│ ? Shell echo hi", "│", "│ Allow execution of: 'echo'?", "│",
                "│ " + _c("32", "● 1. Allow once"), "│   2. Allow for this session",
                "│   3. No, suggest changes (esc)", _c("33", "╰" + "─" * 58 + "╯"), "",
                _c("2", "⠏ Waiting for user confirmation")]
    if state == "idle":
        return ["✦ The queue is fixed.", "", *box]
    raise KeyError(state)


def _opencode(state: str, frame: int) -> list[str]:
    if state == "working":
        bar = ("⬝⬝⬝⬝⬝■■■" * 2)[frame % 8:][:8]
        return [_c("2", "┃") + "  Thinking about the fix", "", "  ▣  Build · GPT-5 Mini",
                "  " + _c("33", bar) + "  " + _c("2", "esc interrupt")]
    if state == "blocked":
        return [_c("33", "┃") + "  △ Permission required", _c("33", "┃") + "    # Shell command",
                _c("33", "┃") + "  $ ls -la", _c("33", "┃"),
                _c("33", "┃") + "   " + _c("7", "Allow once") + "   Allow always   Reject  "
                + _c("2", "ctrl+f fullscreen  ⇆ select  enter confirm")]
    if state == "idle":
        return [_c("2", "┃") + "  " + _c("2", 'Ask anything... "Fix a TODO in the codebase"'), "",
                "  ▣  Build · GPT-5 Mini", _c("2", "  ctrl+p commands")]
    raise KeyError(state)


def _grok(state: str, frame: int) -> list[str]:
    box = [_c("2", "╭" + "─" * 58 + "╮"), _c("2", "│") + " >", _c("2", "╰" + "─" * 58 + "╯")]
    if state == "working":
        spin = BRAILLE[frame % len(BRAILLE)]
        return [_c("36", spin) + f" Waiting on subagent… {2.8 + frame / 5:.1f}s   13s ⇣29.7k " + _c("31", "[stop]"),
                *box, _c("2", "  Esc:cancel │ Ctrl+.:shortcuts")]
    if state == "blocked":
        return [_c("33", "◆") + " Run shell command: ls -la", _c("2", "┃") + "  1 (●) Allow once",
                _c("2", "┃") + "  2 (○) Yes, proceed", _c("2", "┃") + "  z (○) Type your answer here", "",
                _c("2", "  1/3:select │ Ctrl+o:yolo │ Ctrl+c:cancel")]
    if state == "idle":
        return ["The queue is fixed.", *box, _c("2", "  Ctrl+.:shortcuts")]
    raise KeyError(state)


def _hermes(state: str, frame: int) -> list[str]:
    if state == "working":
        glyph = "◜◝◞◟"[frame % 4]
        return ["┊ 💻 terminal 'ls -la' (0.3s)",
                _redrawn("◠ (⊙_⊙) contemplating... (0.1s)", _c("35", glyph) + " (｡•́︿•̀｡) pondering... "
                         + _c("2", f"({1.2 + frame / 5:.1f}s)")),
                _c("2", "❯ Ctrl+C to interrupt…")]
    if state == "blocked":
        return [_c("31", "⚠️  DANGEROUS COMMAND: rm -rf /tmp/build"), "",
                "  [o]nce  |  [s]ession  |  [a]lways  |  [d]eny", "", "  Choice [o/s/a/D]: "]
    if state == "idle":
        return ["  Here is the summary of the change.", "", _c("1;33", "❯") + " "]
    raise KeyError(state)


def _aider(state: str, frame: int) -> list[str]:
    if state == "working":
        spin = "░█"[frame % 2]
        return [_c("2", RULE), "> fix the queue bug", "",
                _redrawn("Waiting for", f"{spin} Waiting for anthropic/claude-sonnet-4")]
    if state == "blocked":
        return ["src/queue.py", "", _c("32", "Add file to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: ")]
    if state == "idle":
        return ["Applied edit to src/queue.py",
                _c("2", "Tokens: 1.0k sent, 186 received. Cost: $0.0010 message, $0.0010 session."),
                _c("2", RULE), _c("1;32", "> ")]
    raise KeyError(state)


def _cursor(state: str, frame: int) -> list[str]:
    if state == "working":
        return [_c("36", "⬡⬢"[frame % 2]) + " Reading… src/queue.py", "", _c("2", "  ctrl+c to stop")]
    if state == "blocked":
        return ["  Run this command?", "  Not in allowlist: npm run test", _c("36", "  → Run (once) (y)"),
                "    Skip (esc or n)"]
    if state == "idle":
        return ["The queue is fixed.", "", _c("2", "  → Add a follow-up")]
    raise KeyError(state)


def _generic(state: str, frame: int) -> list[str]:
    if state == "blocked":
        return ["Writing config.toml", _c("1", "Overwrite config.toml? [y/N] ")]
    raise KeyError(state)


GARBAGE = ["The quick brown fox jumps over the lazy dog.", "", "total 12",
           _c("34", "drwxr-xr-x") + " 2 user user 4096 Dec  3 10:00 src", "-rw-r--r-- 1 user user  120 README.md",
           "(nothing to see here)"]

KINDS: dict[str, Callable[[str, int], list[str]]] = {
    "claude": _claude, "codex": _codex, "gemini": _gemini, "opencode": _opencode, "grok": _grok,
    "hermes": _hermes, "aider": _aider, "cursor": _cursor, "generic": _generic,
}
STATES = ("working", "blocked", "idle", "garbage")


def screen(kind: str, state: str, frame: int = 0) -> str:
    """The text `kind` draws in `state` (spinner `frame` for working); KeyError for a pair it does not draw."""
    if state == "garbage":
        return "\n".join(GARBAGE) + "\n"
    return "\n".join(KINDS[kind](state, frame)) + "\n"


def drawn(kind: str) -> list[str]:
    """The states the stand-in draws for `kind`, garbage included."""
    out = []
    for state in STATES:
        try:
            screen(kind, state)
        except KeyError:
            continue
        out.append(state)
    return out


# A question asked line by line, then what the program prints once answered: five lines and its prompt.
ASKED: dict[str, tuple[str, list[str], str]] = {
    "generic": ("Do you want to proceed? (y/n) ",
                ["Removing build/", "Removed 12 files", "Rebuilding", "Built in 0.4s", "All done."], "$ "),
    "aider": ("Create new file? (Y)es/(N)o [Yes]: ",
              ["Applied edit to src/queue.py", "Commit 3a4b5c6 fix: queue drops the last item",
               "Tokens: 1.0k sent, 186 received. Cost: $0.0010 message, $0.0010 session.", "", RULE], "> "),
}


def _ask(kind: str) -> int:
    """Ask, read the answer (the terminal echoes it), print on and wait at the prompt: the answered question
    stays on the screen above, as it does for any line-mode program."""
    question, after, prompt = ASKED[kind]
    sys.stdout.write("Planning the change to src/queue.py\n" + _c("1", question))
    sys.stdout.flush()
    answer = sys.stdin.readline()
    sys.stdout.write(f"(answer: {answer.strip()})\n" + "".join(line + "\n" for line in after) + prompt)
    sys.stdout.flush()
    while True:
        time.sleep(3600)


def _read_lines(lines: queue.Queue[str | None]) -> None:
    for line in sys.stdin:
        lines.put(line.rstrip("\r\n"))
    lines.put(None)


def _quiet_echo() -> Callable[[], None]:
    """Turn the terminal's echo off (typing must not redraw the bottom line); returns the undo."""
    import termios

    try:
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
    except (termios.error, OSError, ValueError):  # stdin is not a terminal
        return lambda: None
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    return lambda: termios.tcsetattr(fd, termios.TCSANOW, saved)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw an agent's screen in one state and stay alive.")
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("state", choices=(*STATES, "ask"))
    parser.add_argument("--then", choices=STATES, help="the state to switch to once")
    parser.add_argument("--after", type=float, default=1.0, help="seconds before switching to --then")
    parser.add_argument("--hook", metavar="COMMAND",
                        help="a hook command to run by the shell once the first screen is drawn, as an agent runs "
                             "its hooks (`mam report idle`); a line `!hook` typed into it runs it again")
    parser.add_argument("--title", metavar="TEXT", help="set the terminal title (OSC 2), as agents do")
    args = parser.parse_args(argv)
    if args.state == "ask":
        if args.kind not in ASKED:
            parser.error(f"{args.kind} asks no line-mode question")
        try:
            return _ask(args.kind)
        except KeyboardInterrupt:
            return 130
    for state in (args.state, args.then):
        if state is not None and state not in drawn(args.kind):
            parser.error(f"{args.kind} has no {state} screen")

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    undo = _quiet_echo()
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read_lines, args=(lines,), daemon=True).start()
    got: list[str] = []
    state, frame, switch_at, dirty = args.state, 0, time.monotonic() + args.after, True
    hook_due = args.hook is not None
    if args.title is not None:
        sys.stdout.write(f"\x1b]2;{args.title}\x07")
    try:
        while True:
            if dirty or state == "working":
                top = "".join(f"got: {line}\n" for line in got[-5:])
                sys.stdout.write(CLEAR + top + screen(args.kind, state, frame).rstrip("\n"))
                sys.stdout.flush()
                frame += 1
            dirty = False
            if hook_due:
                import subprocess

                subprocess.run(["/bin/sh", "-c", args.hook], stdin=subprocess.DEVNULL, timeout=30, check=False)
                hook_due = False
            try:
                line = lines.get(timeout=0.2)
                if line == "!hook" and args.hook is not None:
                    hook_due = True
                elif line is not None:
                    got.append(line)
                    dirty = True
            except queue.Empty:
                pass
            if args.then is not None and time.monotonic() >= switch_at:
                state, args.then, dirty = args.then, None, True
    except KeyboardInterrupt:
        return 130
    finally:
        undo()


if __name__ == "__main__":
    sys.exit(main())
