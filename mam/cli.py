"""The command line. The only module that parses arguments; the core and the backends never import it.

It is built on the standard library's argparse: importing typer (with its vendored click) cost 25-30 ms of
every command's start-up, a quarter of mam's own share, and start-up is a feature (bench/RESULTS.md).
Core modules are imported inside each command, so `mam --help` and `mam version` load neither plugins nor
YAML.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from mam import __version__
from mam.errors import EXIT_BACKEND_NOT_FOUND, MamError

if TYPE_CHECKING:
    from mam.app import App

MIN_WATCH = 0.1  # seconds between two reconcile passes: less is a busy loop
DESCRIPTION = "mam, the multi-agent mux: track the coding agents running in terminal multiplexer panes."
EPILOG = """\
environment:
  MAM_BACKEND            backend when --backend is not given (then `backend:` in .mam/config.yaml, then herdr)
  MAM_SERVER             server when --server is not given (spawn, stop, exec; default mam)
  MAM_WORKSPACE          project directory holding .mam/ (also $WORKSPACE_ROOT, $CLAUDE_PROJECT_DIR)
  MAM_TIMEOUT            seconds each backend call may take (default 10; 0 < s <= 3600)
  MAM_BOOTSTRAP_TIMEOUT  seconds to wait for a started server to answer (default 10)
  MAM_NO_AUTOSTART=1     never start a server, not even for spawn or exec
  MAM_DISABLE_PLUGINS    comma-separated plugins not to load; MAM_LOAD_PLUGINS: load only these
  MAM_DEBUG=1            show the traceback of an internal error

exit codes: 0 done (drift and unknown servers are findings), 1 an operation failed, 2 bad input,
3 backend or its binary not found, 4 a backend plugin failed to load.
Every command but exec takes --json, after the command or before it (exec prints the backend's own output)."""


def _open(ns: argparse.Namespace) -> App:
    from mam.app import App

    return App.open(ns.workspace, ns.backend)


def _emit(doc: dict[str, Any], as_json: bool, text: str | None = None, compact: bool = False) -> None:
    if as_json:
        sys.stdout.write(json.dumps(doc, separators=(",", ":")) if compact else json.dumps(doc, indent=2))
        sys.stdout.write("\n")
    elif text is not None:
        sys.stdout.write(text + "\n")
    sys.stdout.flush()


# The commands. Each takes the parsed namespace and returns its exit code.

def cmd_status(ns: argparse.Namespace) -> int:
    from mam import render
    from mam.status import status_document

    app = _open(ns)
    doc = status_document(app, ns.server or ())
    code = _say_unanswered(app, doc)
    _emit(doc, ns.json, None if ns.json else render.status_text(doc))
    return code


def _say_unanswered(app: App, doc: dict[str, Any]) -> int:
    """Servers that could not be asked are said first, on stderr; a missing backend binary is exit 3."""
    from mam.status import unanswered

    notes, binary_missing = unanswered(app, doc)
    for note in notes:
        sys.stderr.write(f"mam: {note}\n")
    sys.stderr.flush()
    return EXIT_BACKEND_NOT_FOUND if binary_missing else 0


def cmd_reconcile(ns: argparse.Namespace) -> int:
    from mam import render
    from mam.reconcile import reconcile_document

    if ns.apply and ns.dry_run:
        raise MamError("usage", "--apply and --dry-run contradict each other", hint="drop one of them")
    if ns.watch is not None and not (math.isfinite(ns.watch) and ns.watch >= MIN_WATCH):
        raise MamError("usage", f"--watch {ns.watch:g}: expected a number of seconds, at least {MIN_WATCH:g}")
    if ns.watch is not None and ns.once:
        raise MamError("usage", "--once and --watch contradict each other", hint="drop one of them")
    app = _open(ns)
    if ns.watch is None:
        doc = reconcile_document(app, apply=ns.apply, adopt=ns.adopt)
        code = _say_unanswered(app, doc)
        _emit(doc, ns.json, None if ns.json else render.reconcile_text(doc))
        return code
    try:
        while True:
            doc = reconcile_document(app, apply=ns.apply, adopt=ns.adopt)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            _emit(doc, ns.json, None if ns.json else f"--- {stamp}\n{render.reconcile_text(doc)}", compact=True)
            time.sleep(ns.watch)
    except KeyboardInterrupt:
        _end_children()
        return 0


def cmd_ls(ns: argparse.Namespace) -> int:
    from mam import render
    from mam.commands import ls_document
    from mam.model import ServerState

    doc, outcome = ls_document(_open(ns), ns.server)
    _emit(doc, ns.json, None if ns.json else render.ls_text(doc))
    return 1 if outcome.state is ServerState.UNKNOWN else 0


def cmd_bootstrap(ns: argparse.Namespace) -> int:
    from mam.commands import bootstrap_document

    doc = bootstrap_document(_open(ns), ns.server)
    _emit(doc, ns.json, None if ns.json else f"{doc['backend']} server {doc['server']} is up ({doc['message']})")
    return 0


def cmd_spawn(ns: argparse.Namespace) -> int:
    from mam.lifecycle import spawn_document

    doc = spawn_document(_open(ns), ns.name, agent=ns.agent, server=ns.server, cwd=ns.cwd, command=ns.command,
                         args=ns.args, progress=not ns.json)
    s = doc["session"]
    _emit(doc, ns.json, None if ns.json else f"{s['name']} is {s['status']} on {s['backend']} server "
                                             f"{s['server']} (pane {s['pane_id']}, cwd {s['cwd']})")
    return 0


def cmd_stop(ns: argparse.Namespace) -> int:
    from mam.lifecycle import stop_document

    doc = stop_document(_open(ns), ns.name, ns.server, force=ns.force, progress=not ns.json)
    _emit(doc, ns.json, None if ns.json else f"{doc['name']} on {doc['backend']} server {doc['server']}: "
                                             f"{doc['status']} ({doc['message']})")
    return 0


def _removed_text(doc: dict[str, Any]) -> str:
    verb = "would forget" if doc["dry_run"] else "forgot"
    if not doc["removed"]:
        return f"nothing to remove from {doc['registry']}"
    return "\n".join(f"{verb} {e['name']} ({e['backend']} server {e['server']}, {e['status']})"
                     for e in doc["removed"])


def cmd_forget(ns: argparse.Namespace) -> int:
    from mam.forget import forget_document

    doc = forget_document(_open(ns), ns.names, ns.server, force=ns.force, dry_run=ns.dry_run)
    _emit(doc, ns.json, _removed_text(doc))
    return 0


def cmd_prune(ns: argparse.Namespace) -> int:
    from mam.forget import prune_document

    statuses = [s for s in (ns.status or "terminated,stopped").split(",") if s]
    doc = prune_document(_open(ns), statuses, ns.older_than, dry_run=ns.dry_run)
    _emit(doc, ns.json, _removed_text(doc))
    return 0


def cmd_exec(ns: argparse.Namespace) -> int:
    from mam.passthrough import exec_command

    if not ns.args:
        raise MamError("usage", "mam exec needs the backend's command line after --",
                       hint="e.g. `mam --backend tmux exec --server S -- list-sessions`, or `-- agent list` on herdr")
    program, argv, env = exec_command(_open(ns), ns.server, ns.args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(program, argv, env)  # noqa: S606 - explicit program and argv, no shell


def cmd_shim_install(ns: argparse.Namespace) -> int:
    from pathlib import Path

    from mam.passthrough import install_shims

    target = Path(ns.dir) if ns.dir else _open(ns).workspace.dot_mam / "shim"
    shims = [str(path) for path in install_shims(target)]
    _emit({"schema": 1, "dir": str(target.resolve()), "shims": shims}, ns.json, "\n".join(shims))
    print(f'use them with: export PATH="{target.resolve()}:$PATH" MAM_SERVER=NAME', file=sys.stderr)
    return 0


def cmd_skills_install(ns: argparse.Namespace) -> int:
    from pathlib import Path

    from mam.skills import DEFAULT_DEST, install_skills

    target = Path(ns.dest) if ns.dest else _open(ns).workspace.root / DEFAULT_DEST
    for path in install_skills(target, force=ns.force):
        print(path)
    return 0


def cmd_demo(ns: argparse.Namespace) -> int:
    from mam.demo import run_demo

    if not ns.json:
        return run_demo(print)
    steps: list[dict[str, Any]] = []
    code = run_demo(lambda line: None, steps.append)
    _emit({"schema": 1, "steps": steps}, True)
    return code


def cmd_backends(ns: argparse.Namespace) -> int:
    from mam import render
    from mam.commands import backends_document

    doc = backends_document(_open(ns))
    _emit(doc, ns.json, None if ns.json else render.backends_text(doc))
    return 0


def cmd_env(ns: argparse.Namespace) -> int:
    from mam import render
    from mam.commands import env_document

    doc = env_document(_open(ns))
    _emit(doc, ns.json, None if ns.json else render.env_text(doc))
    return 0


def cmd_version(ns: argparse.Namespace) -> int:
    _emit({"schema": 1, "version": __version__}, ns.json, f"mam {__version__}")
    return 0


# The parser.

class _Parser(argparse.ArgumentParser):
    """argparse that raises a usage MamError (one line, exit 2) instead of printing its own usage block."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False  # `--backen` is a typo, not --backend
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise MamError("usage", message, hint=f"run '{self.prog} --help'")


def build_parser() -> _Parser:
    parser = _Parser(prog="mam", description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-b", "--backend", metavar="NAME",
                        help="backend to use: herdr (default), tmux, zellij, or a plugin's; also $MAM_BACKEND, "
                             "then `backend:` in .mam/config.yaml")
    parser.add_argument("--workspace", metavar="DIR", help="project directory holding .mam/ (default: discovered)")
    parser.add_argument("--version", action="version", version=f"mam {__version__}",
                        help="print the version and exit")
    parser.add_argument("--json", dest="json_global", action="store_true",
                        help="print one JSON document on stdout (as the command's own --json)")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, run: Callable[[argparse.Namespace], int], summary: str, json_flag: bool = True,
                sub: Any = commands) -> _Parser:
        p: _Parser = sub.add_parser(name, help=summary, description=summary)
        p.set_defaults(run=run)
        if json_flag:
            p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
        return p

    p = command("status", cmd_status, "Every registry row with what its server says about it now. Never starts a "
                                      "server.")
    p.add_argument("--server", metavar="NAME", action="append",
                   help="only this server of the selected backend (repeatable)")

    p = command("reconcile", cmd_reconcile, "Compare the registry with the live servers and report drift; fix it "
                                            "only with --apply.")
    p.add_argument("--apply", action="store_true", help="write the fixes to the registry (the only writing form)")
    p.add_argument("--adopt", action="store_true", help="register live named agents that have no row")
    p.add_argument("--watch", metavar="SECONDS", type=float, help="repeat every SECONDS until interrupted")
    p.add_argument("--once", action="store_true", help="one pass (the default)")
    p.add_argument("--dry-run", action="store_true", help="write nothing (the default)")
    p.add_argument("--emit-diff", action="store_true", help="print the report (the default)")

    p = command("ls", cmd_ls, "The live agents of one server of the selected backend, straight from the backend.")
    p.add_argument("--server", metavar="NAME", required=True, help="the server to list")

    p = command("bootstrap", cmd_bootstrap, "Start a server of the selected backend if it is down, with a "
                                            "scrubbed environment.")
    p.add_argument("--server", metavar="NAME", required=True, help="the server to start")

    p = command("spawn", cmd_spawn, "Start an agent in a new pane or session, registered at once; starts its "
                                    "server if it is down.")
    p.add_argument("name", help="the agent's name, unique on its server")
    p.add_argument("args", nargs="*", default=[], help="arguments for the agent, after --")
    p.add_argument("--agent", metavar="KIND", help="agent kind: claude, codex, gemini, opencode, ...")
    p.add_argument("--server", metavar="NAME", help="server to start it on (default $MAM_SERVER, else mam)")
    p.add_argument("--cwd", metavar="DIR", help="working directory")
    p.add_argument("--command", metavar="CMD", help="run this command instead of the agent's own program")

    p = command("stop", cmd_stop, "Close an agent's pane or session and mark it stopped (terminated when it was "
                                  "already gone).")
    p.add_argument("name", help="the agent to stop")
    p.add_argument("--server", metavar="NAME", help="its server")
    p.add_argument("--force", action="store_true", help="ask the backend even when NAME is not registered here "
                                                        "(on --server, else the default server)")

    p = command("forget", cmd_forget, "Remove agents' rows from the registry (not their panes). An active row "
                                      "takes --force.")
    p.add_argument("names", nargs="+", metavar="NAME", help="the agents to forget")
    p.add_argument("--server", metavar="NAME", help="only on this server")
    p.add_argument("--force", action="store_true", help="forget rows registered starting or running too")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, write nothing")

    p = command("prune", cmd_prune, "Remove the rows of agents that are gone (terminated, stopped) from the "
                                    "registry.")
    p.add_argument("--status", metavar="LIST", help="comma-separated statuses to remove (default "
                                                    "terminated,stopped; never starting or running)")
    p.add_argument("--older-than", metavar="DAYS", type=float, help="only rows whose last change is older")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, write nothing")

    p = command("exec", cmd_exec, "Run the backend's own CLI against one server (herdr --session S ..., tmux -L "
                                  "S ...), scrubbed. Starts the server first if it is down, unless "
                                  "MAM_NO_AUTOSTART=1. Its output and exit code are the backend's own, so it "
                                  "takes no --json. Options that pick another server or socket (tmux -L/-S, "
                                  "herdr --session, zellij --session/-s) are refused.",
                json_flag=False)
    p.add_argument("args", nargs="*", default=[], help="the backend's own command line, after --")
    p.add_argument("--server", metavar="NAME", help="the server (default $MAM_SERVER)")

    shim = command("shim", _help_of(commands, "shim"), "Shims that route herdr, tmux and zellij through `mam "
                                                       "exec`.", json_flag=False)
    shim_commands = shim.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)
    p = command("install", cmd_shim_install, "Write `herdr`, `tmux` and `zellij` shims; put DIR first on PATH "
                                             "and set MAM_SERVER to use them.", sub=shim_commands)
    p.add_argument("--dir", metavar="DIR", help="where to write them (default .mam/shim/)")

    skills = command("skills", _help_of(commands, "skills"), "Agent skills that drive mam.", json_flag=False)
    skills_commands = skills.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)
    p = command("install", cmd_skills_install, "Copy the multi-agent-mux skills (status, monitor, spawn) into a "
                                               "project.", json_flag=False, sub=skills_commands)
    p.add_argument("--dest", metavar="DIR", help="where to put them (default .agents/skills/; e.g. "
                                                 ".claude/skills/)")
    p.add_argument("--force", action="store_true", help="overwrite files that differ from mam's (your edits, "
                                                        "or an older mam's copy)")

    command("demo", cmd_demo, "Show mam at work on a private tmux server: spawn, status, drift, reconcile "
                              "--apply; then clean up.")
    command("backends", cmd_backends, "Installed backends: where each comes from, its binary, its version, load "
                                      "errors.")
    command("env", cmd_env, "The environment a server bootstrap would get: what is removed, and which rule "
                            "removed it.")
    command("version", cmd_version, "Print the version.")
    parser.set_defaults(run=lambda ns: _print_help(parser))
    return parser


def _help_of(commands: Any, name: str) -> Callable[[argparse.Namespace], int]:
    """`mam shim` and `mam skills` alone show their own help, as `mam` alone does."""
    return lambda ns: _print_help(commands.choices[name])


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse argv. What follows the first `--` belongs to the program a command runs (spawn, exec)."""
    trailing: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, trailing = argv[:at], argv[at + 1:]
    parser = build_parser()
    attached = _values_attached(argv, parser)
    _refuse_unknown_options(attached, parser)
    ns, extras = parser.parse_known_args(attached)
    if extras:
        first = extras[0]
        words: list[str] = ["mam"]
        level: argparse.ArgumentParser = parser
        for word in argv:  # the (sub)command the error belongs to, for the hint
            if word in _commands(level):
                words.append(word)
                level = _commands(level)[word]
        raise MamError("usage", f"No such option: {first}" if first.startswith("-") else
                       f"unexpected argument {first!r}", hint=f"run '{' '.join(words)} --help'")
    if trailing:
        if ns.run not in (cmd_spawn, cmd_exec):
            raise MamError("usage", "only spawn and exec take arguments after --", hint="run 'mam --help'")
        ns.args = [*ns.args, *trailing]
    if ns.json_global:
        if not hasattr(ns, "json"):
            raise MamError("usage", "mam exec takes no --json: its output is the backend's own",
                           hint="run 'mam exec --help'")
        ns.json = True
    return ns


def _refuse_unknown_options(words: list[str], parser: argparse.ArgumentParser) -> None:
    """Name the first word that is no option of its (sub)command, before argparse complains of something else
    (`mam spawn -L` is about -L, not about the missing NAME); suggest the closest real option."""
    level, path = parser, ["mam"]
    for word in words:
        if word in _commands(level):
            level = _commands(level)[word]
            path.append(word)
            continue
        if not word.startswith("-") or word == "-" or word[1:2].isdigit():
            continue
        option = word.split("=", 1)[0]
        known = [o for action in level._actions for o in action.option_strings]  # noqa: SLF001
        if option in known:
            continue
        if option == "--json":
            raise MamError("usage", f"{' '.join(path)} takes no --json: its output is the backend's own",
                           hint=f"run '{' '.join(path)} --help'")
        import difflib

        close = difflib.get_close_matches(option, [o for o in known if o.startswith("--")], n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"run '{' '.join(path)} --help'"
        raise MamError("usage", f"No such option: {option}", hint=hint)


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # noqa: SLF001 - argparse has no public way to list them
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def _value_options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every option that takes a value, in all commands, mapped to its long form."""
    found: dict[str, str] = {}
    for sub in _commands(parser).values():
        found.update(_value_options(sub))
    for action in parser._actions:  # noqa: SLF001
        if action.option_strings and action.nargs is None:
            for option in action.option_strings:
                found[option] = action.option_strings[-1]
    return found


def _values_attached(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """`--server -L` must reach name validation (exit 2, "invalid server name") rather than read as a missing
    value: an option that takes a value takes the next word, whatever it looks like, as click does."""
    options = _value_options(parser)
    out: list[str] = []
    words = iter(argv)
    for word in words:
        value = next(words, None) if word in options else None
        out.append(word if value is None else f"{options[word]}={value}")
    return out


def _end_children() -> None:
    """An interrupted command leaves no backend process behind (they run in sessions of their own)."""
    runner = sys.modules.get("mam.runner")
    if runner is not None:
        runner.kill_running()


def _wants_json(argv: list[str]) -> bool:
    args = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in args


def _fail(error: MamError, as_json: bool) -> NoReturn:
    sys.stderr.write(f"mam: {error.message}\n")
    if error.hint:
        sys.stderr.write(f"hint: {error.hint}\n")
    if as_json:
        sys.stdout.write(json.dumps(error.as_json()) + "\n")
    sys.stdout.flush()
    sys.exit(error.exit_code)


def main(argv: list[str] | None = None) -> NoReturn:
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = _wants_json(args)
    try:
        ns = parse(args)
        code = ns.run(ns)
    except MamError as exc:
        _fail(exc, as_json)
    except KeyboardInterrupt:
        _end_children()
        sys.stderr.write("mam: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        os._exit(0)
    except Exception as exc:
        if os.environ.get("MAM_DEBUG") == "1":
            raise
        _fail(MamError("operation_failed", f"internal error: {type(exc).__name__}: {exc}",
                       hint="rerun with MAM_DEBUG=1 for a traceback, and report it"), as_json)
    sys.exit(code)


__all__ = ["build_parser", "main"]
