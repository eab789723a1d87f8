"""The typer app: the root options, and every command with its one-line summary, in the order `mam --help`
lists them. The commands themselves are in queries.py, agents.py and tools.py."""

from typing import Annotated, Any

import click
import typer

from mam import __version__
from mam.cli import agents, hooks, interact, queries, serve, tools, top
from mam.cli.context import State, show_help

DESCRIPTION = "mam, the multi-agent mux: track the coding agents running in terminal multiplexer panes."
# \b keeps click from rewrapping the block that follows it.
EPILOG = """\
\b
environment:
  MAM_BACKEND            backend when --backend is not given (then `backend:` in .mam/config.yaml, then herdr)
  MAM_SERVER             server when --server is not given (spawn, stop, exec; spawn and stop: default mam)
  MAM_WORKSPACE          project directory holding .mam/ (also $WORKSPACE_ROOT, $CLAUDE_PROJECT_DIR)
  MAM_REGISTRY           the registry file (absolute) instead of .mam/agent-sessions.yaml
  MAM_TIMEOUT            seconds each backend call may take (default 10; 0 < s <= 3600)
  MAM_BOOTSTRAP_TIMEOUT  seconds to wait for a started server to answer (default 10)
  MAM_SCREEN_TIMEOUT     seconds the state rules may take to read one screen (default 1)
  MAM_MAX_OUTPUT         bytes one backend call may print (default 16M; 4K to 1G); over it: unknown
  MAM_HERDR_START_TIMEOUT  seconds herdr's agent start may wait for the agent (default 30; 3 < s <= 300)
  MAM_HOST               ssh destination when --host is not given (unset, empty or local: this machine)
  MAM_NO_AUTOSTART=1     never start a server, not even for spawn or exec
  MAM_DISABLE_PLUGINS    comma-separated plugins not to load; MAM_LOAD_PLUGINS: load only these
  MAM_DEBUG=1            show the traceback of an internal error
  MAM_TRACE_PLUGINS=1    one line on stderr per plugin hook call
  (every setting, with its bounds: docs/cli.md)

\b
exit codes: 0 done (drift and unknown servers are findings), 1 an operation failed, 2 bad input,
3 backend or its binary not found, 4 a backend plugin failed to load.
Every command but exec, attach, top and serve takes --json, after the command or before it (exec and
attach run the backend's own client; top is a live view; serve a server).
Shell completion: mam --install-completion (bash, zsh or fish)."""

SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}
# A stray word reaches the command (ctx.args), which names it in mam's words (context.begin).
LEAF: dict[str, Any] = {"allow_extra_args": True}


def _print_version(ctx: click.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"mam {__version__}")
        raise typer.Exit()


def _root(ctx: typer.Context,
          backend: Annotated[str | None, typer.Option(
              "--backend", "-b", metavar="NAME",
              help="backend to use: herdr (default), tmux, zellij, or a plugin's; also $MAM_BACKEND, then "
                   "`backend:` in .mam/config.yaml")] = None,
          workspace: Annotated[str | None, typer.Option(
              "--workspace", metavar="DIR", help="project directory holding .mam/ (default: discovered)")] = None,
          as_json: Annotated[bool, typer.Option(
              "--json", help="print one JSON document on stdout (as the command's own --json)")] = False,
          version: Annotated[bool, typer.Option(
              "--version", is_eager=True, callback=_print_version, help="print the version and exit")] = False,
          ) -> int | None:
    state = ctx.ensure_object(State)
    state.backend, state.workspace, state.json = backend, workspace, as_json
    return show_help(ctx) if ctx.invoked_subcommand is None else None


def _group_help(ctx: typer.Context) -> int | None:
    """`mam shim` and `mam skills` alone show their own help, as `mam` alone does."""
    return show_help(ctx) if ctx.invoked_subcommand is None else None


def _typer(help: str | None = None, epilog: str | None = None) -> typer.Typer:
    # rich_markup_mode=None: click's plain help, and rich is never imported even where it is installed.
    return typer.Typer(help=help, epilog=epilog, rich_markup_mode=None, invoke_without_command=True,
                       pretty_exceptions_enable=False, context_settings=SETTINGS)


app = _typer(DESCRIPTION, EPILOG)
app.callback()(_root)


# The root's commands in the order `mam --help` lists them, as they are added (typer would put groups last).
ORDER: list[str] = []


def _add(group: typer.Typer, name: str, run: Any, summary: str, short: str | None = None) -> None:
    group.command(name, help=summary, short_help=short or summary, context_settings=LEAF)(run)
    if group is app:
        ORDER.append(name)


def _group(name: str, help: str, leaf: str, run: Any, summary: str) -> None:
    """A group of the root with one command, `mam shim install`; the group alone shows its help."""
    sub = _typer()
    sub.callback()(_group_help)
    _add(sub, leaf, run, summary)
    app.add_typer(sub, name=name, help=help)
    ORDER.append(name)


_add(app, "status", queries.status, "Every registry row with what its server says about it now. Never starts a "
                                    "server.")
_add(app, "watch", queries.watch, "Tell every change of an agent into blocked or done as it happens: a line, a JSON "
                                  "line (--json), a desktop notification (--notify), your command (--exec).")
_add(app, "reconcile", queries.reconcile, "Compare the registry with the live servers and report drift; fix it "
                                          "only with --apply.")
_add(app, "ls", queries.ls, "The live agents of one server of the selected backend, straight from the backend.")
_add(app, "wait", interact.wait, "Wait until agents are in one of some states (--until blocked,idle; --any or "
                                 "--all of them); exit 1 on --timeout. Never starts a server.")
_add(app, "send", interact.send, "Type text into an agent's pane, as characters (several lines as one paste); "
                                 "--enter presses Enter. Never starts a server.")
_add(app, "peek", interact.peek, "Print the last lines of an agent's screen, escape sequences removed. Never starts "
                                 "a server.")
_add(app, "attach", interact.attach, "Put this terminal in front of an agent's pane with the backend's own client "
                                     "(tmux switches the client it runs in); over ssh for another host.")
_add(app, "top", top.top, "A full-screen live view of every agent, blocked ones first; keys attach, peek, send, "
                         "answer, stop, restore and filter. Needs a terminal and Textual (mam[top]).",
     "A full-screen live view of every agent, blocked first; keys act on the selected one.")
_add(app, "serve", serve.serve, "Serve the fleet on a web page and over HTTP (the view of top, its actions, an event "
                                 "stream, Prometheus metrics) on 127.0.0.1:8765; any other --bind address needs "
                                 "--token-file. Needs mam[web].",
     "Serve the fleet on a web page and over HTTP, with metrics (127.0.0.1 unless --bind).")
_add(app, "bootstrap", agents.bootstrap, "Start a server of the selected backend if it is down, with a scrubbed "
                                         "environment.")
_add(app, "spawn", agents.spawn, "Start an agent in a new pane or session, registered at once; starts its server "
                                 "if it is down.")
_add(app, "stop", agents.stop, "Close an agent's pane or session and mark it stopped (terminated when it was "
                               "already gone).")
_add(app, "restore", agents.restore, "Start registered agents again after their server died, from their launch "
                                     "spec, resuming their sessions; --dry-run shows the plan.")
_add(app, "forget", agents.forget, "Remove agents' rows from the registry (not their panes). An active row takes "
                                   "--force.")
_add(app, "prune", agents.prune, "Remove the rows of agents that are gone (terminated, stopped) from the registry.")
_add(app, "exec", agents.exec_,
     "Run the backend's own CLI against one server (herdr --session S ..., tmux -L S ...), scrubbed. Starts the "
     "server first if it is down, unless MAM_NO_AUTOSTART=1. Its output and exit code are the backend's own, so it "
     "takes no --json. Options that pick another server or socket (tmux -L/-S, herdr --session, zellij "
     "--session/-s) are refused.",
     "Run the backend's own CLI against one server, scrubbed; takes no --json.")

_group("shim", "Shims that route herdr, tmux and zellij through `mam exec`.", "install", tools.shim_install,
       "Write `herdr`, `tmux` and `zellij` shims; put DIR first on PATH and set MAM_SERVER to use them.")
_group("skills", "Agent skills that drive mam.", "install", tools.skills_install,
       "Copy the multi-agent-mux skills (status, monitor, spawn) into a project.")

worktree_group = _typer()
worktree_group.callback()(_group_help)
_add(worktree_group, "remove", agents.worktree_remove, "Remove an agent's worktree only when nothing would be lost "
                                                       "(else list what would be); --force saves it all to a "
                                                       "mam/lost/ branch first.")
_add(worktree_group, "list", agents.worktree_list, "Every worktree mam made: its agent, branch and the state of its "
                                                   "work.")
_add(worktree_group, "prune", agents.worktree_prune, "Drop the records of worktrees whose folder is gone.")
app.add_typer(worktree_group, name="worktree", help="The git worktrees of agents spawned with --worktree.")
ORDER.append("worktree")

hooks_group = _typer()
hooks_group.callback()(_group_help)
_add(hooks_group, "install", hooks.install, "Add mam's entries to each agent's own hook settings (Claude Code, Codex, "
                                            "Gemini CLI), each running `mam report STATE`; a backup is kept.")
_add(hooks_group, "uninstall", hooks.uninstall, "Remove mam's entries from the agents' hook settings, and nothing "
                                                "else.")
_add(hooks_group, "status", hooks.status, "Say per agent kind whether mam's hooks are installed.")
HOOKS_HELP = "The agents' own hooks, which tell mam their state (docs/hooks.md)."
# short_help: Click cuts a group's help at 45 characters in `mam --help` (`...`), where the commands' is whole.
app.add_typer(hooks_group, name="hooks", help=HOOKS_HELP, short_help=HOOKS_HELP)
ORDER.append("hooks")
_add(app, "report", hooks.report, "Record the calling agent's state, for its hooks: .mam/reports/<$MAM_AGENT>.json "
                                  "of $MAM_WORKSPACE; nothing outside an agent mam spawned.",
     "Record the calling agent's state (run by its hooks).")

_add(app, "demo", tools.demo, "Show mam at work on a private tmux server: spawn, status, drift, reconcile --apply, "
                              "restore after kill-server; then clean up.")
_add(app, "backends", queries.backends, "Installed backends: where each comes from, its binary, its version and "
                                        "whether mam is tested against it, load errors.")
_add(app, "env", queries.env, "The environment a server bootstrap would get: what is removed, and which rule "
                              "removed it.")
_add(app, "kinds", queries.kinds, "The agent kinds mam knows: the programs each is recognised by, how its session "
                                  "is resumed, its screen rules.")
_add(app, "audit", queries.audit, "Who did what to which agent: the lines of .mam/audit.jsonl, which every action "
     "that changes something appends to (from the CLI, mam top, mam serve and the skills).")
_add(app, "version", queries.version, "Print the version.")


def command() -> click.Group:
    """The click tree typer builds from the app, its commands in the order they were added."""
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    group.commands = {name: group.commands[name] for name in ORDER}
    return group
