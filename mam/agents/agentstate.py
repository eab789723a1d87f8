"""An agent's state (docs/states.md): the backend's own answer when it has one, else its pane's screen read by
the kind library's rules, with the facts the multiplexer knows (a dead pane, how long the screen is unchanged,
whether anyone looked at it since). Never guessed: anything mam cannot read is `unknown`, with the reason.

Captured inside the parallel fan-out of the listing (one capture call per server), and only when asked for;
the screens are read by the rules after it, in the calling thread, each within its time limit (`settle`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mam.plugin.records import Agent, AgentState, Failure, PaneCapture
from mam.util.errors import MamError

if TYPE_CHECKING:
    from mam.kinds.library import Library
    from mam.plugin.manager import Plugins
    from mam.plugin.records import CallContext

# Deferred imports (inside functions), for start-up: the kind library and its screen rules load when a screen is first
# read.

# A working screen unchanged for longer than this is stale: the agent (or its terminal) is stuck, or the rule
# matched a line that lingered. It is reported `unknown`, never `working`.
STALE_AFTER = 10.0
SOURCES = ("backend", "screen", "none")


def _evidence(rule: str | None = None, line: str | None = None, fact: str | None = None) -> dict[str, Any]:
    return {"rule": rule, "line": line, "fact": fact}


def unknown(fact: str, source: str = "none", rule: str | None = None, line: str | None = None) -> AgentState:
    return AgentState("unknown", source, _evidence(rule, line, fact))


NOT_RUNNING = unknown("not running: its server lists no live pane for it")
NOT_ASKED = unknown("its server could not be asked")
SERVER_DOWN = unknown("not running: its server is down")
# The facts of an `unknown` read from a screen that shows no question: no rule matches it, or a working screen
# has not changed for a while (`read_capture`). `mam send --answer --confirm` takes either as an answer taken.
NO_RULE = "no rule matches the screen"
# The generic rule that reads a plain command's prompt (mam/kinds/agents.yaml) holds only after this many seconds
# without output: before that, or where the backend cannot say when the screen last changed, it is `unknown`.
PROMPT_RULE = "generic.prompt"
PROMPT_QUIET = 3.0
STALE = "stale: "


def asks_nothing(state: Mapping[str, Any]) -> bool:
    """Whether a state (its JSON: `state`, `state_source`, `evidence`) shows an agent that asks no question: it
    was read, and is not `blocked`. An `unknown` counts only when its screen was read and no rule matched it or
    a working one went stale; not when the pane's program ended, a rule ran out of time, or nothing was read."""
    if state.get("state") in ("working", "idle", "done"):
        return True
    if state.get("state") != "unknown" or state.get("state_source") != "screen":
        return False
    fact = (state.get("evidence") or {}).get("fact") or ""
    return fact == NO_RULE or fact.startswith(STALE)


class LazyLibrary:
    """The kind library with the workspace's `.mam/states.yaml`, loaded the first time a screen is read (a
    backend with states of its own never needs it), once for all threads. A bad file raises MamError."""

    def __init__(self, user_file: Path | None) -> None:
        import threading

        self.user_file = user_file
        self._lock = threading.Lock()
        self._library: Library | None = None

    def prefetch(self) -> None:
        """Load it in a thread of its own now: parsing and compiling the rules is CPU work that overlaps the
        listing calls, which mostly wait on their processes. A failure is raised again by the call that needs it."""
        import threading

        def load() -> None:
            try:
                self()
            except Exception:  # the next call raises it, where it is reported
                pass

        threading.Thread(target=load, daemon=True).start()

    def __call__(self) -> Library:
        with self._lock:
            if self._library is None:
                from mam.kinds.library import load_library

                self._library = load_library(self.user_file)
            return self._library


def kind_of(library: Library, kinds: tuple[str | None, ...], command: str | None) -> str | None:
    """The first of `kinds` (the row's `agent`, then the listing's) that the library knows, else the kind of
    the program the pane runs, else None (read with the generic rules)."""
    for kind in kinds:
        if kind and kind in library.kinds:
            return kind
    return library.kind_for(command.split()) if command and command.strip() else None


@dataclass(frozen=True)
class Screen:
    """A captured screen still to be read by the rules. The fan-out's threads only capture; the rules run in the
    main thread, where a time limit can stop a rule that backtracks without end (mam.kinds.classify)."""

    kinds: tuple[str | None, ...]
    capture: PaneCapture | None
    stale_after: float


def settle(found: Mapping[str, AgentState | Screen], library: Callable[[], Library],
           budget: float | None = None) -> dict[str, AgentState]:
    """Each state of `found`, its screens read now, each within `budget` seconds (None: no limit)."""
    with screen_time_limits([found]):
        return {name: read_capture(library(), state.kinds, state.capture, state.stale_after, budget)
                if isinstance(state, Screen) else state for name, state in found.items()}


def screen_time_limits(found: Iterable[Mapping[str, AgentState | Screen]]) -> AbstractContextManager[None]:
    """Around the reading of the screens of `found` in the main thread: the signal handler of their time limits
    set once for them all (mam.kinds.classify.time_limits); nothing to set when there is no screen to read."""
    if any(isinstance(state, Screen) for states in found for state in states.values()):
        from mam.kinds.classify import time_limits

        return time_limits()
    return nullcontext()


def read_capture(library: Library, kinds: tuple[str | None, ...], capture: PaneCapture | None,
                 stale_after: float = STALE_AFTER, budget: float | None = None) -> AgentState:
    """One agent's state from what its backend captured, its rules given at most `budget` seconds."""
    if capture is None:
        return unknown("its pane was not captured")
    if capture.dead:
        # Its program has ended: not idle, whatever the last screen shows.
        return unknown("the pane's program has ended", "screen", "pane_dead", capture.dead_status or "exited")
    from mam.kinds.classify import LOST, clean
    from mam.kinds.reading import read_screen

    if capture.text is None:  # the backend's reason may quote its multiplexer: cleaned as a screen line is
        return unknown(clean(capture.unread)[:200] if capture.unread else "the backend gave no screen text")

    verdict = read_screen(library, kind_of(library, kinds, capture.command), capture.text, budget,
                              capture.below_cursor)
    if verdict.overtime == LOST:
        return unknown(f"its screen was not read within {budget:g} s: the process reading it did not answer and "
                       "was stopped", "screen")
    if verdict.overtime is not None:
        return unknown(f"rule {verdict.overtime} took more than {budget:g} s to read the screen (a pattern that "
                       "backtracks: see docs/states.md)", "screen", verdict.overtime)
    if verdict.rule is None:
        return unknown(NO_RULE, "screen")
    if verdict.state == "working" and capture.idle_seconds is not None and capture.idle_seconds > stale_after:
        # Rounded up: never "unchanged for 10 s (more than 10 s)".
        return unknown(f"{STALE}a working screen unchanged for {math.ceil(capture.idle_seconds)} s (more than "
                       f"{stale_after:g} s)", "screen", verdict.rule, verdict.line)
    if verdict.rule == PROMPT_RULE and (capture.idle_seconds is None or capture.idle_seconds < PROMPT_QUIET):
        when = ("its backend does not say when its screen last changed" if capture.idle_seconds is None
                else f"its screen changed {capture.idle_seconds:g} s ago")
        return unknown(f"a prompt at the cursor, but {when} (idle after {PROMPT_QUIET:g} s without output)",
                       "screen", verdict.rule, verdict.line)
    if verdict.state == "idle" and capture.seen is False:
        return AgentState("done", "screen", _evidence(verdict.rule, verdict.line,
                                                      "no client has looked at it since its last output"))
    return AgentState(verdict.state, "screen", _evidence(verdict.rule, verdict.line))


def server_states(plugins: Plugins, backend_name: str, server: str, agents: tuple[Agent, ...],
                  kinds: Mapping[str, str | None], ctx: CallContext,
                  stale_after: float = STALE_AFTER) -> dict[str, AgentState | Screen]:
    """The state of each of `agents` (live, named, of one server): native answers first, then one capture call
    for the rest, whose screens are left for `settle` to read. `kinds` is each name's registered kind. A failure
    is `unknown` with why."""
    backend = plugins.backend(backend_name)
    out: dict[str, AgentState | Screen] = {}
    rest: list[Agent] = []
    for agent in agents:
        assert agent.name is not None
        native = plugins.agent_state(backend, server, agent, ctx)
        if native is not None:
            out[agent.name] = native
        else:
            rest.append(agent)
    if not rest:
        return out
    captured = plugins.capture_panes(backend, server, tuple(rest), ctx)
    if captured is None:
        return {**out, **{a.name or "": unknown(f"backend {backend_name} gives no agent state") for a in rest}}
    if isinstance(captured, Failure):
        error = plugins.classify(backend, captured)
        from mam.kinds.classify import clean

        why = clean(error.message)[:200]  # the multiplexer's own words: cleaned as every quoted line is
        return {**out, **{a.name or "": unknown(f"capture failed: {why}") for a in rest}}
    for agent in rest:
        name = agent.name or ""
        out[name] = Screen((kinds.get(name), agent.agent), captured.get(name), stale_after)
    return out


def safe_server_states(plugins: Plugins, backend_name: str, server: str, agents: tuple[Agent, ...],
                       kinds: Mapping[str, str | None], ctx: CallContext,
                       stale_after: float = STALE_AFTER) -> dict[str, AgentState | Screen] | Exception:
    """`server_states`, with a MamError handed back for the caller to raise, and a plugin bug turned into
    `unknown`: one server's failure must not spoil the others' answers."""

    try:
        return server_states(plugins, backend_name, server, agents, kinds, ctx, stale_after)
    except MamError as exc:
        return exc
    except Exception as exc:  # a plugin bug
        return {a.name or "": unknown(f"backend {backend_name} failed: {exc!r}"[:200]) for a in agents}
