"""`mam top`'s `n`: the form that asks what `mam spawn` would be told (name, kind or command, server, directory,
a worktree of its own and its branch), and the question spawn asks at a terminal before it runs a launch spec that
holds the workspace's words. The spawn itself is mam.live.actions.Actions.spawn, through spawn's own code."""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Checkbox, Input, Static

from mam.agents.specsign import CONSENT_QUESTION, doubt_lines
from mam.util.render import visible

# The form's fields: (key, label, what an empty field means). Kind or command: at least one (both: the command
# runs and its screen is read as the kind's, as `mam spawn --agent KIND --command CMD`). The worktree choice sits
# between the directory and the branch (WORKTREE).
FIELDS = (("name", "name", "the agent's name"),
          ("agent", "kind", "--agent: claude, codex, gemini, ... (or a command below)"),
          ("command", "command", "--command: what to run instead of the kind's program"),
          ("server", "server", "--server (empty: the default server)"),
          ("cwd", "directory", "--cwd: relative to the workspace root (empty: the workspace root)"),
          ("branch", "branch", "--branch, with a worktree: new from HEAD or an existing one (empty: mam/NAME)"))
# The worktree choice's text, unticked and ticked (said in words: a tick's colour alone is not seen everywhere);
# the worktree is of the directory's repository.
WORKTREE = ("no (Space: a git worktree, .mam/worktrees/NAME)", "yes: a new git worktree, .mam/worktrees/NAME")
TITLE = "spawn a new agent, as mam spawn (Tab: next field, Enter: start it, Escape: cancel)"
MARK = "› "  # before the label of the field that has the focus: seen without colours too


class SpawnForm(ModalScreen[dict[str, str] | None]):
    """The fields of `mam spawn`, the server and directory filled in with their defaults, and the worktree choice
    (--worktree, its --branch). Enter in a text field starts it once it has a name and a kind or a command, and a
    branch only with the worktree chosen (else the form says what is missing and stays); Enter or Space on the
    worktree choice ticks it. A default that holds a character the terminal would act on or hide is left out
    (its field empty: the same default, and nothing hostile drawn)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    SpawnForm { align: center middle; }
    SpawnForm > Vertical { width: 90%; max-width: 110; height: auto; border: round $accent; padding: 0 1; }
    SpawnForm Horizontal { height: auto; }
    SpawnForm Horizontal { margin-top: 1; }
    SpawnForm .label { width: 12; padding: 0 1 0 0; }
    SpawnForm Input { width: 1fr; }
    SpawnForm Checkbox { width: 1fr; }
    #spawn-said { color: $warning; margin-top: 1; }
    """

    def __init__(self, defaults: dict[str, str]) -> None:
        super().__init__()
        self.defaults = {key: value for key, value in defaults.items() if visible(value) == value}

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(TITLE), id="spawn-title")
            for key, label, placeholder in FIELDS:
                if key == "branch":
                    with Horizontal():
                        yield Static(Text("worktree"), classes="label", id="label-worktree")
                        yield Checkbox(Text(WORKTREE[0]), id="spawn-worktree", compact=True)
                with Horizontal():
                    yield Static(Text(label), classes="label", id=f"label-{key}")
                    yield Input(value=self.defaults.get(key, ""), placeholder=placeholder, id=f"spawn-{key}",
                                compact=True)  # one line each: the form fits 80x24
            yield Static(Text(""), id="spawn-said")

    def on_mount(self) -> None:
        self.query_one("#spawn-name", Input).focus()

    def on_descendant_focus(self, event: Any) -> None:
        """The focused field's label is marked (›), so that where typing goes shows in any terminal."""
        focused = getattr(event, "widget", None)
        for key, label in (*((key, label) for key, label, _ in FIELDS), ("worktree", "worktree")):
            mark = MARK if focused is not None and focused.id == f"spawn-{key}" else ""
            self.query_one(f"#label-{key}", Static).update(Text(mark + label))

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        event.checkbox.label = Text(WORKTREE[event.value])

    def values(self) -> dict[str, str]:
        """The fields as typed; `worktree` is "yes" when it is chosen, else ""."""
        found = {key: self.query_one(f"#spawn-{key}", Input).value for key, _, _ in FIELDS}
        found["worktree"] = "yes" if self.query_one("#spawn-worktree", Checkbox).value else ""
        return found

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        form = self.values()
        missing = ("name" if not form["name"].strip() else
                   "agent" if not (form["agent"].strip() or form["command"].strip()) else
                   "worktree" if form["branch"].strip() and not form["worktree"] else None)
        if missing is None:
            self.dismiss(form)
            return
        said = {"name": "a name first", "agent": "a kind (--agent) or a command (--command) to run",
                "worktree": "a branch is for a worktree (--branch is for --worktree): tick worktree, or empty "
                            "the branch"}[missing]
        self.query_one("#spawn-said", Static).update(Text(said))
        self.query_one(f"#spawn-{missing}").focus()

    def action_cancel(self) -> None:
        self.dismiss(None)


class Consent(ModalScreen[bool]):
    """spawn's question at a terminal, as the CLI asks it: y runs it and signs it as yours, anything else
    refuses (with the CLI's message). What it would run scrolls (arrows, PgUp/PgDn, Home/End), the question kept
    in sight below it: a workspace's long argv must not push its own end, or the question, off the screen."""

    DEFAULT_CSS = """
    Consent { align: center middle; }
    Consent > Vertical { width: 95%; height: auto; max-height: 100%; border: round $error; padding: 0 1; }
    Consent VerticalScroll { height: auto; max-height: 80vh; }
    """
    SCROLLS: ClassVar[dict[str, str]] = {"up": "scroll_up", "down": "scroll_down", "pageup": "scroll_page_up",
                                         "pagedown": "scroll_page_down", "home": "scroll_home", "end": "scroll_end"}

    def __init__(self, entry: dict[str, Any]) -> None:
        super().__init__()
        self.lines = "\n".join(visible(line) for line in doubt_lines(entry))
        self.text = f"{self.lines}\n{CONSENT_QUESTION} [y/N]"

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_subtitle = "↑ ↓ PgUp PgDn: all of it"
            with VerticalScroll():
                yield Static(Text(self.lines), id="consent")
            yield Static(Text(f"{CONSENT_QUESTION} [y/N]"), id="consent-question")

    def on_key(self, event: Any) -> None:
        event.stop()
        scroll = self.SCROLLS.get(event.key)
        if scroll is not None:  # reading the rest is no answer (every other key was a no, unseen lines unread)
            getattr(self.query_one(VerticalScroll), scroll)(animate=False)
            return
        self.dismiss(event.key in ("y", "Y"))


def ask_in_view(app: App[Any], entry: dict[str, Any]) -> bool:
    """spawn_document's `ask`, from the worker thread the spawn runs in: the question on the view's screen, the
    thread held until it is answered; no (never run) when the view ends first."""
    answer: Future[bool] = Future()
    app.call_from_thread(app.push_screen, Consent(entry), lambda yes: answer.set_result(bool(yes)))
    while True:
        try:
            return answer.result(timeout=0.25)
        except FutureTimeout:
            if not app.is_running:
                return False
