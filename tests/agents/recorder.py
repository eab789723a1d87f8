#!/usr/bin/env python3
"""A stand-in agent that records every byte it reads, as a coding agent's TUI would read them.

    python3 tests/agents/recorder.py LOG [--state idle|blocked|working] [--plain] [--deaf] [--turn SECONDS]

It asks for bracketed paste (ESC[?2004h, as Claude Code, Codex and Gemini do; `--plain` does not), reads its
terminal byte by byte (no line editing, no echo, a carriage return kept as one), and appends each read to LOG as
it came. It draws the claude stand-in's screen (tests/agents/standin.py) of its state; an Enter outside a paste
submits: the screen turns `working` for --turn seconds (default 3), then `idle` (a turn). `--deaf` never reacts
(a prompt that was not taken). So a test reads exactly what arrived, and sees a turn start as mam reads it.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import termios
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from standin import CLEAR, screen  # the stand-in beside this file

PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"


def submits(data: bytes, pasting: bool) -> tuple[int, bool]:
    """How many Enters (carriage returns) outside a bracketed paste `data` holds, and whether a paste is still
    open after it (`pasting`: one was open before)."""
    count, i = 0, 0
    while i < len(data):
        if data.startswith(PASTE_START, i):
            pasting, i = True, i + len(PASTE_START)
        elif data.startswith(PASTE_END, i):
            pasting, i = False, i + len(PASTE_END)
        else:
            count += data[i] == 13 and not pasting
            i += 1
    return count, pasting


def main() -> int:
    parser = argparse.ArgumentParser(description="Record what an agent's terminal reads.")
    parser.add_argument("log")
    parser.add_argument("--state", choices=("idle", "blocked", "working"), default="idle")
    parser.add_argument("--plain", action="store_true", help="do not ask for bracketed paste")
    parser.add_argument("--deaf", action="store_true", help="never start a turn")
    parser.add_argument("--turn", type=float, default=3.0, help="seconds a turn takes")
    args = parser.parse_args()

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    fd = sys.stdin.fileno()
    try:
        saved: list | None = termios.tcgetattr(fd)
    except termios.error:  # not a terminal (the fake zellij's panes read a FIFO): bytes arrive as written
        saved = None
    if saved is not None:
        raw = list(saved)
        raw[0] &= ~(termios.ICRNL | termios.INLCR | termios.IXON)  # a carriage return arrives as itself
        raw[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN)
        termios.tcsetattr(fd, termios.TCSANOW, raw)
    if not args.plain:
        sys.stdout.write("\x1b[?2004h")
    state, frame, pasting, idle_at = args.state, 0, False, None
    dirty = True
    try:
        with open(args.log, "ab", buffering=0) as log:
            while True:
                if dirty or state == "working":
                    sys.stdout.write(CLEAR + screen("claude", state, frame).rstrip("\n"))
                    sys.stdout.flush()
                    frame, dirty = frame + 1, False
                ready, _, _ = select.select([fd], [], [], 0.2)
                if ready:
                    data = os.read(fd, 65536)
                    if not data:
                        return 0
                    log.write(data)
                    entered, pasting = submits(data.replace(b"\n", b"\r") if saved is None else data, pasting)
                    if entered and not args.deaf:
                        state, idle_at, dirty = "working", time.monotonic() + args.turn, True
                if idle_at is not None and time.monotonic() >= idle_at:
                    state, idle_at, dirty = "idle", None, True
    except KeyboardInterrupt:
        return 130
    finally:
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSANOW, saved)


if __name__ == "__main__":
    sys.exit(main())
