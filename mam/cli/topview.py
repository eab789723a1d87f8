"""The live view of `mam top`, in Textual. It only draws and takes keys: the rows, their order, the filter, the
columns and the pacing come from mam.live.topmodel; every server is asked in a thread of the model's poller, and
every key's action runs in a worker thread, so a slow or hung server never holds the screen."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Static

from mam.cli.topspawn import SpawnForm, ask_in_view
from mam.live.actions import Actions, attach
from mam.live.changes import Changes, change_text
from mam.live.notify import Announcer
from mam.live.topmodel import (
    HEADERS,
    Pacer,
    Poller,
    ServerLine,
    TopRow,
    ago,
    as_sessions,
    cell_of,
    columns_for,
    filtered,
    fingerprint,
    question,
    redraw_at,
    widths_for,
)
from mam.util.errors import MamError
from mam.util.render import visible

TICK = 0.25  # seconds between two looks at the poller (cheap: a snapshot under a lock)
SAY_FOR = 10.0  # seconds a message stays on the bottom line before the keys' reminder comes back
HINT = "? keys  q quit"
AGES = ("age", "for")  # the columns that change with time alone
STYLES = {"blocked": "bold red", "done": "green", "working": "yellow", "idle": "cyan", "unknown": "dim"}
KEYS = [("Enter", "attach to the agent's pane (back here when you detach)"),
        ("p", "peek: the last lines of its screen"),
        ("s", "send it a prompt (as mam send NAME TEXT --enter)"),
        ("a", "answer a blocked agent (as mam send NAME --answer TEXT --enter)"),
        ("x", "stop it (asks first; as mam stop)"),
        ("r", "restore a dead one (asks first; as mam restore NAME)"),
        ("n", "spawn an agent: a form (name, kind or command, server, cwd, worktree)"),
        ("/", "filter by name, state, backend, server or host (empty: all)"),
        ("e", "hide the ended agents (stopped, finished, failed), or show them again"),
        ("?", "this list"), ("Escape", "close this list, a peek or a question (q and ? close a list too)"),
        ("q", "quit")]


def _titled(head: str, lines: list[str]) -> str:
    return "\n".join([head, *(visible(text) for text in lines)])


def _key_of(row: TopRow) -> str:
    return "\x1f".join(row.key)


class Ask(ModalScreen[str | None]):
    """One line of input: a prompt, an answer, a filter. Escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    Ask { align: center middle; }
    Ask > Vertical { width: 90%; max-width: 100; height: auto; border: round $accent; padding: 0 1; }
    """

    def __init__(self, title: str, value: str = "") -> None:
        super().__init__()
        self.title_text, self.value = title, value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.title_text), id="ask-title")
            yield Input(value=self.value, id="ask")

    def retitle(self, title: str) -> None:
        self.title_text = title  # what compose shows, if it has not run yet
        try:
            self.query_one("#ask-title", Static).update(Text(title))
        except NoMatches:  # not composed yet, or already answered and gone
            pass

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class Confirm(ModalScreen[bool]):
    """y stops, anything else keeps it running."""

    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > Static { width: auto; max-width: 90%; border: round $error; padding: 0 1; }
    """

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Static(Text(f"{self.question} [y/N]"))

    def on_key(self, event: Any) -> None:
        event.stop()
        self.dismiss(event.key in ("y", "Y"))


class Pager(ModalScreen[None]):
    """Text to read (a peek, the keys): any of Escape, q or the key that opened it closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,p,question_mark", "close", "close")]
    DEFAULT_CSS = """
    Pager { align: center middle; }
    Pager > VerticalScroll { width: 95%; height: 90%; border: round $accent; padding: 0 1; }
    """

    def __init__(self, title: str, lines: list[str]) -> None:
        super().__init__()
        self.title_text, self.lines = title, lines

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(self.title_text, style="bold"))
            yield Static(Text("\n".join(self.lines)), id="pager-text")

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).scroll_end(animate=False)

    def action_close(self) -> None:
        self.dismiss(None)


class TopApp(App[None]):
    """One row per registered agent, blocked first; the servers that are down or not answering below."""

    TITLE = "mam top"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "peek", "peek"), Binding("s", "send", "send"), Binding("a", "answer", "answer"),
        Binding("x", "stop", "stop"), Binding("r", "restore", "restore"), Binding("n", "spawn", "spawn"),
        Binding("slash", "filter", "filter"),
        Binding("e", "ended", "ended"),
        Binding("question_mark", "keys", "keys"), Binding("q", "quit", "quit"),
        # Ctrl-C ends the view as it ends any command (Textual's own only says to press Ctrl-Q), from any screen.
        Binding("ctrl+c", "quit", "quit", show=False, priority=True)]
    DEFAULT_CSS = """
    #title { height: 1; background: $boost; }
    #table { height: 1fr; }
    #servers { height: auto; max-height: 6; color: $warning; }
    #said { height: 1; background: $boost; }
    """

    def __init__(self, actions: Actions, interval: float = 1.0, patience: float | None = None,
                 notify: bool = False, command: list[str] | None = None) -> None:
        super().__init__()
        self.actions = actions
        # --notify/--exec: each change into blocked or done is told as `mam watch` tells it, never printing over the
        # screen: notify-send from a worker thread, the user's command one change at a time, in order, in the
        # announcer's own thread (its queue bounded: a drop is said on the bottom line).
        self.announcer: Announcer | None = None
        self.changes = Changes()
        if notify or command:
            import subprocess

            self.announcer = Announcer(notify, command, actions.app.env,
                                       bell=lambda: self.call_from_thread(self.bell), tell=self._tell,
                                       output=subprocess.DEVNULL)
        # A server is "not answering" once its call has taken longer than a refresh would wait, at least 2 s.
        patience = patience if patience is not None else max(2.0, interval)
        self.poller = Poller(actions.registered, actions.fetch, patience)
        self.pacer = Pacer(base=interval, most=8 * interval)
        self.query_text = ""
        self.hide_ended = False
        self.rows: list[TopRow] = []
        self.lines: list[ServerLine] = []
        self._layout: dict[str, int] = {}
        self._by_key: dict[str, tuple[str, str, str, str]] = {}  # a table row's key -> its agent's
        # The rows in the table, top to bottom, and their cells as (text, style): Text's == ignores its style.
        self._drawn: dict[str, list[tuple[str, str]]] = {}
        self._fixed: dict[TopRow, dict[str, tuple[str, str]]] = {}  # each row's cells but its ages
        self._shown: dict[str, str] = {}  # what the title and the server lines show
        self._next_refresh = 0.0
        self._seen_version = -1
        self._last_print: Any = None
        self._refreshed_at: float | None = None
        self._titled_at = 0.0
        self._due = 0.0  # when the table must be drawn again for its ages (time.time()), nothing else changing
        self._counts = (0, 0, 0, 0)  # agents shown, agents, agents blocked, ended ones hidden: the title's
        self._drawn_scroll = 0.0  # the table's scroll offset as last drawn
        self.say_for = SAY_FOR
        self._said_until = 0.0  # when the bottom line's message expires (time.monotonic()); 0: none shown

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        table: DataTable[Any] = DataTable(id="table", cursor_type="row", zebra_stripes=False)
        yield table
        yield Static(id="servers")
        yield Static(Text(HINT), id="said")

    def on_mount(self) -> None:
        # Kept, never queried again: a modal screen hides them from queries, and the view's end removes them
        # while a tick may still be due (a query then raised NoMatches).
        self.table = self.query_one(DataTable)
        self.lines_shown = {name: self.query_one(name, Static) for name in ("#title", "#servers", "#said")}
        self.table.focus()
        self.set_interval(TICK, self.tick)
        self.tick()

    # The refresh loop: ask when the pacer says so, draw when an answer came or when an age shown changes (the
    # title's "refreshed Ns ago" alone once a second): at 1,000 rows a draw is work, and after the first minute
    # the ages change once a minute.

    def tick(self) -> None:
        if not self.table.is_attached:  # the view is ending: its widgets are gone
            return
        now = time.monotonic()
        if self._said_until and now >= self._said_until:  # an old message would read as news
            self._said_until = 0.0
            self.lines_shown["#said"].update(Text(HINT))
        if now >= self._next_refresh:
            rows, lines = self.poller.snapshot()
            mark = fingerprint(rows, lines)
            changed, self._last_print = mark != self._last_print, mark
            self._next_refresh = now + self.pacer.next(changed, self.poller.spent())
            self._refresh_servers()
        scrolled = self.table.scroll_offset.y != self._drawn_scroll  # rows whose ages wait to be drawn
        if self.poller.version != self._seen_version or time.time() >= self._due or scrolled:
            self._seen_version = self.poller.version
            self.draw()
        elif now - self._titled_at >= 1.0:
            self._title()

    @work(thread=True, group="refresh")
    def _refresh_servers(self) -> None:
        try:
            self.poller.refresh()  # reads the registry here, off the screen's thread
            self._refreshed_at = time.time()
        except MamError as exc:
            self.call_from_thread(self.say, f"cannot read the registry: {exc.message}")

    def kick(self) -> None:
        """Refresh now (after a key's action), at the quick pace."""
        self.pacer.reset()
        self._next_refresh = 0.0

    def draw(self) -> None:
        now = time.time()
        self.rows, self.lines = self.poller.snapshot()
        if self.announcer is not None:
            changes = self.changes.step(as_sessions(self.rows), new_is_change=False)
            if changes:
                self.say(change_text(changes[-1]))
                for change in changes:
                    self.announcer.exec_later(change)  # queued here, in the order the changes were seen
                if self.announcer.notify:
                    self._announce(changes)
        shown = self._shown_rows()
        table = self.table
        columns = columns_for(self.size.width, any(r.work for r in shown))
        selected = self.selected()
        drawn = self._plain_cells(shown, columns, now)
        with self.batch_update():
            longest = {c: max([0, *(len(cells[i][0]) for cells in drawn.values())]) for i, c in enumerate(columns)}
            widths = widths_for(self.size.width, columns, longest)
            if widths != self._layout:  # a resize, or a longer name: the columns again, in the same frame
                table.clear(columns=True)
                for column in columns:
                    table.add_column(HEADERS[column], key=column, width=widths[column])
                self._layout = widths
                self._drawn = {}  # new columns: every row again
            first, last = self._on_screen(table)
            if list(drawn) == list(self._drawn) and table.row_count == len(drawn):
                # The same rows in the same order: only the cells that changed are rewritten, in place; the ages
                # of the rows off screen when they scroll into view (any cell rewritten redraws the whole
                # screenful of the table, and a thousand rows' ages turn at a thousand moments).
                for index, (key, cells) in enumerate(drawn.items()):
                    before = self._drawn.get(key)
                    for i, (column, cell) in enumerate(zip(columns, cells, strict=True)):
                        if before is not None and before[i] != cell and column in AGES and not first <= index < last:
                            cells[i] = before[i]  # as the table still shows it
                        elif before is None or before[i] != cell:
                            table.update_cell(key, column, Text(cell[0], style=cell[1]))
            else:
                table.clear()
                for key, cells in drawn.items():
                    table.add_row(*(Text(text, style=style) for text, style in cells), key=key)
                keys = [r.key for r in shown]
                if selected is not None and selected in keys:  # the cursor stays on the agent, wherever it went
                    table.move_cursor(row=keys.index(selected), animate=False)
            self._by_key = {_key_of(r): r.key for r in shown}
            self._drawn = drawn
            self._counts = (len(shown), len(self.rows), sum(r.state == "blocked" for r in self.rows),
                            sum(r.ended for r in self.rows) if self.hide_ended else 0)
            self._title()
            self._show("#servers", "\n".join(visible(line.text(now)) for line in self.lines))
            self._drawn_scroll = table.scroll_offset.y
            self._due = self._next_due(shown[first:last], columns, now)

    def _shown_rows(self) -> list[TopRow]:
        shown = filtered(self.rows, self.query_text)
        return [r for r in shown if not r.ended] if self.hide_ended else shown

    def _on_screen(self, table: DataTable[Any]) -> tuple[int, int]:
        """The rows the table shows (a row each line), with one more either side."""
        top = int(table.scroll_offset.y)
        return max(0, top - 1), top + table.size.height + 1

    def _next_due(self, on_screen: list[TopRow], columns: list[str], now: float) -> float:
        """When the table shows something else with no new answer: the next second while a server line or a
        reason counts seconds (a server not answering, last seen ...) or a call is out (it may become one),
        else when an age on screen turns (topmodel.redraw_at)."""
        if self.lines or self.poller.busy() or any(r.stale or r.live == "unknown" for r in on_screen):
            return now + 1.0
        ages = [r.said_at for r in on_screen] if "age" in columns else []
        ages += [r.since for r in on_screen] if "for" in columns else []
        return redraw_at(ages, now)

    def _title(self) -> None:
        self._titled_at = time.monotonic()
        shown, rows, blocked, hidden = self._counts
        seen = f"refreshed {int(time.time() - self._refreshed_at)}s ago" if self._refreshed_at else "asking the servers"
        flt = (f"  filter: {self.query_text}" if self.query_text else "") + (
            f"  {hidden} ended hidden (e shows them)" if hidden else "")
        self._show("#title", visible(f"mam top  {shown}/{rows} agents, {blocked} blocked  {seen}, "
                                     f"every {self.pacer.interval:.1f}s{flt}"), layout=False)

    def _show(self, widget: str, text: str, layout: bool = True) -> None:
        """`text` into a line of the view when it is new: each update lays the screen out again and redraws it,
        which once a second with nothing new was a quarter of what an idle view cost. The title is one line
        high whatever it says (no layout); the server lines may grow."""
        if self._shown.get(widget) != text:
            self._shown[widget] = text
            self.lines_shown[widget].update(Text(text), layout=layout)

    @work(thread=True, group="announce")
    def _announce(self, changes: list[dict[str, Any]]) -> None:
        assert self.announcer is not None
        for change in changes:
            self.announcer.notify_now(change)

    def _tell(self, text: str) -> None:
        """Say `text` on the bottom line, from the view's thread or any other."""
        if threading.current_thread() is threading.main_thread():
            self.say(text)
        else:
            self.call_from_thread(self.say, text)

    def on_unmount(self) -> None:
        if self.announcer is not None:
            self.announcer.close()  # the command running now ends with the view; the waiting ones are not run
        worker = sys.modules.get("mam.kinds.worker")
        if worker is not None:
            worker.stop()  # the process that read the screens for the poller's threads ends with the view

    def _plain_cells(self, rows: list[TopRow], columns: list[str], now: float) -> dict[str, list[tuple[str, str]]]:
        """Each row's cells as (text, style), by row key. A row's cells other than its ages change only with
        the row, so they are kept from the last draw for each row that is the same: at 1,000 rows the draw
        once a second made every cell anew (9,000 of them) and was most of what an idle view cost."""
        kept: dict[TopRow, dict[str, tuple[str, str]]] = {}
        out = {}
        for row in rows:
            fixed = kept[row] = self._fixed.get(row) or self._fixed_cells(row)
            ages = "dim" if row.stale or row.ended else ""
            out[_key_of(row)] = [(ago(row.said_at, now), ages) if c == "age" else (ago(row.since, now), ages)
                                 if c == "for" else fixed[cell_of(c, columns)] for c in columns]
        self._fixed = kept  # the rows of this draw only: the cache never outgrows the table
        return out

    @staticmethod
    def _fixed_cells(row: TopRow) -> dict[str, tuple[str, str]]:
        cells = row.cells(0.0)
        dim = row.stale or row.ended  # ended: a group of its own below the live ones, dimmed
        style = "dim" if dim else STYLES.get(row.state, "")
        return {c: (visible(cells[c]), style if c == "state" else ("dim" if dim else "")) for c in cells
                if c not in AGES}

    def selected(self) -> tuple[str, str, str, str] | None:
        """The agent under the cursor, by the key of the row the table shows there: never by its place in a list
        the filter or a new order has changed since (a row number would hand a key to another agent)."""
        table = self.table
        row = table.cursor_row
        keys = list(self._drawn)
        if not table.row_count or not 0 <= row < len(keys):
            return None
        return self._by_key.get(keys[row])

    def selected_row(self) -> TopRow | None:
        key = self.selected()
        row = next((r for r in self.rows if r.key == key), None)
        if row is None:
            self.say("no agent selected")
        return row

    def say(self, text: str) -> None:
        self.lines_shown["#said"].update(Text(visible(text)))
        self._said_until = time.monotonic() + self.say_for

    # The keys. Each action runs in a worker thread and says its outcome on the bottom line.

    @work(thread=True, group="action")
    def act(self, label: str, action: Callable[..., Any], *args: Any) -> None:
        try:
            said = f"{label}: {action(*args)}"
        except MamError as exc:
            said = f"{label}: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")
        self.call_from_thread(self.say, said)
        self.call_from_thread(self.kick)

    def action_send(self) -> None:
        row = self.selected_row()
        if row is not None:
            self._ask_then(visible(f"send to {row.name} (Enter submits, Escape cancels):"), "send",
                           self.actions.send, row)

    def action_answer(self) -> None:
        row = self.selected_row()
        if row is None:
            return
        if row.state != "blocked":
            self.say(f"{row.name} is {row.state}, not blocked: press s to send it a prompt")
            return
        head = visible(f"answer {row.name} ({row.why}; Enter submits, Escape cancels):")
        line = str((row.evidence or {}).get("line") or "")
        box = self._ask_then(_titled(head, question(line, [])), "answer", self.actions.answer, row)
        self._question(row, box, head, line)

    @work(thread=True, group="action")
    def _question(self, row: TopRow, box: Ask, head: str, line: str) -> None:
        """The question itself in the answer box: the evidence line at once (keys typed meanwhile go to the box),
        then the lines around it on the agent's screen as soon as they are read; not only the rule that matched."""
        try:
            screen = self.actions.peek(row)
        except MamError:
            return  # the evidence line stays
        self.call_from_thread(box.retitle, _titled(head, question(line, screen)))

    def _ask_then(self, title: str, label: str, action: Callable[[TopRow, str], str], row: TopRow) -> Ask:
        def done(text: str | None) -> None:
            if text is not None:
                self.say(f"{label} {row.name}: sending")
                self.act(f"{label} {row.name}", action, row, text)

        box = Ask(title)  # each caller made its title visible (the question's lines kept apart)
        self.push_screen(box, done)
        return box

    def action_spawn(self) -> None:
        """`n`: the spawn form, then `mam spawn` through its own code: its question about a launch spec that holds
        the workspace's words asked here, its refusals said on the bottom line."""
        def done(form: dict[str, str] | None) -> None:
            if form is not None:
                self.say(f"spawn: starting {form['name'].strip()}")
                self.act("spawn", self.actions.spawn, form, lambda entry: ask_in_view(self, entry))

        try:
            defaults = self.actions.spawn_defaults()
        except MamError as exc:  # a $MAM_SERVER that is no server name: said, as spawn would say it
            self.say(f"spawn: {exc.message}")
            return
        self.push_screen(SpawnForm(defaults), done)

    def action_stop(self) -> None:
        self._confirm_then("stop", "stopping", "left running")

    def action_restore(self) -> None:
        self._confirm_then("restore", "restoring", "not restored")

    def _confirm_then(self, verb: str, doing: str, declined: str) -> None:
        """Ask `VERB NAME on BACKEND server SERVER?` of the selected row; on yes, take the action of that name."""
        row = self.selected_row()
        if row is None:
            return

        def done(yes: bool | None) -> None:
            if yes:
                self.say(f"{verb} {row.name}: {doing}")
                self.act(f"{verb} {row.name}", getattr(self.actions, verb), row)
            else:
                self.say(f"{row.name} {declined}")

        self.push_screen(Confirm(visible(f"{verb} {row.name} on {row.backend} server {row.server}?")), done)

    def action_filter(self) -> None:
        def done(text: str | None) -> None:
            if text is not None:
                self.query_text = text.strip()
                self.draw()

        self.push_screen(Ask("filter by name, state, backend, server or host (empty: all):", self.query_text), done)

    def action_ended(self) -> None:
        self.hide_ended = not self.hide_ended
        self.say("ended agents hidden (e shows them)" if self.hide_ended else "ended agents shown")
        self.draw()

    def action_keys(self) -> None:
        self.push_screen(Pager("keys (Escape closes this list)", [f"{key:>6}  {what}" for key, what in KEYS] + [
            "", "Rows: blocked first, then done, then the rest; the ended ones (dimmed) below. Columns dropped as "
                "the terminal narrows: AGE, SOURCE, HOST, BACKEND, FOR, SERVER."]))

    def action_peek(self) -> None:
        row = self.selected_row()
        if row is not None:
            self.say(f"peek {row.name}: capturing")
            self._peek(row)

    @work(thread=True, group="action")
    def _peek(self, row: TopRow) -> None:
        try:
            lines = self.actions.peek(row)
        except MamError as exc:
            self.call_from_thread(self.say, f"peek {row.name}: {exc.message}")
            return
        self.call_from_thread(self.say, f"peek {row.name}: {len(lines)} lines")
        self.call_from_thread(self.push_screen, Pager(visible(f"{row.name}: the last lines of its screen"),
                                                      [visible(line) for line in lines]))

    def on_resize(self, event: Any) -> None:
        self._due = 0.0  # the columns that fit the new width, at the next tick

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        row = self.selected_row()
        if row is not None:
            self._attach_worker(row)

    @work(thread=True, group="action")
    def _attach_worker(self, row: TopRow) -> None:
        try:
            command = self.actions.attach_command(row)
        except MamError as exc:
            self.call_from_thread(self.say, f"attach {row.name}: {exc.message}")
            return
        self.call_from_thread(self._attach_here, row, command)

    def _attach_here(self, row: TopRow, command: tuple[str, list[str], dict[str, str]]) -> None:
        try:
            with self.suspend():
                code = attach(*command)
        except Exception as exc:  # no terminal to hand over (a headless driver): say so, keep the view
            self.say(f"attach {row.name}: cannot hand the terminal over: {type(exc).__name__}")
            return
        self.say(f"attach {row.name}: detached (exit {code})")
        self.kick()
