"""The command line read against the click tree before click parses it, and click's usage errors in mam's form.

click would read `--server -L` as the value `-L` too, but it names the first fault it meets in its own order
(`mam spawn -L` would be about the missing NAME) and in its own words. Here every word is walked once, level by
level: the first option that no (sub)command along the way has is named, with the closest real option as the
hint, before anything else is said.
"""

from __future__ import annotations

import click

from mam.cli.context import no_json
from mam.util.errors import MamError

HELP_OPTIONS = ("-h", "--help")
# Options whose number may be left out, with the value they then take (mam.cli.queries.DEFAULT_WATCH).
OPTIONAL_VALUES = {("mam status", "--watch"): "2"}


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """What follows the first `--` belongs to the program a command runs (spawn, exec)."""
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def _options(command: click.Command) -> dict[str, click.Option | None]:
    found: dict[str, click.Option | None] = dict.fromkeys(HELP_OPTIONS)
    for param in command.params:
        if isinstance(param, click.Option):
            found.update(dict.fromkeys([*param.opts, *param.secondary_opts], param))
    return found


def _takes_value(option: click.Option | None) -> bool:
    return option is not None and not option.is_flag and not option.count and option.nargs == 1


class _Words:
    """The words, one at a time, with a look at the next one."""

    def __init__(self, words: list[str]) -> None:
        self.words, self.at = words, 0

    def __iter__(self) -> _Words:
        return self

    def __next__(self) -> str:
        if self.at >= len(self.words):
            raise StopIteration
        self.at += 1
        return self.words[self.at - 1]

    def peek(self) -> str:
        return self.words[self.at] if self.at < len(self.words) else ""


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _long_form(option: click.Option) -> str:
    return next((o for o in option.opts if o.startswith("--")), option.opts[0])


def _closest(word: str, choices: list[str]) -> str | None:
    import difflib  # only for a mistyped word

    # Compared without their dashes: two shared dashes would make `--bogus` look like `--host`.
    bare = {choice.lstrip("-"): choice for choice in choices}
    close = difflib.get_close_matches(word.lstrip("-"), list(bare), n=1, cutoff=0.6)
    return bare[close[0]] if close else None


def prepare(words: list[str], root: click.Group) -> tuple[list[str], str]:
    """The words for click, each value attached to its option (`--server -L` becomes `--server=-L`: an option
    that takes a value takes the next word, whatever it looks like, so `-L` reaches name validation). Raises the
    usage error of the first unknown option, else of the first word that is no command of a group. Also
    returns the (sub)command the words name, `mam shim install`, for the hint of what click finds later."""
    level: click.Command = root
    path = ["mam"]
    unknown_command: MamError | None = None
    out: list[str] = []
    remaining = _Words(words)
    for word in remaining:
        commands = level.commands if isinstance(level, click.Group) else {}
        if word in commands:
            level = commands[word]
            path.append(word)
        elif isinstance(level, click.Group) and not word.startswith("-") and unknown_command is None:
            unknown_command = _no_such_command(word, level, " ".join(path))
        elif word.startswith("-") and word != "-" and not word[1:2].isdigit():
            name = word.split("=", 1)[0]
            options = _options(level)
            if name not in options:
                raise _no_such_option(name, options, " ".join(path))
            option = options[name]
            if option is not None and _takes_value(option) and "=" not in word:
                # `status --watch` alone, or before another word (`--json`): its default, and that word is read
                # as itself (typer has no option with an optional value)
                optional = OPTIONAL_VALUES.get((" ".join(path), name))
                value = optional if optional and not _is_number(remaining.peek()) else next(remaining, None)
                if value is not None:
                    word = f"{_long_form(option)}={value}"
        out.append(word)
    if unknown_command is not None:
        raise unknown_command
    return out, " ".join(path)


GLOBAL_OPTIONS = ("-b", "--backend", "--workspace")


def _no_such_option(name: str, options: dict[str, click.Option | None], path: str) -> MamError:
    if name == "--json":
        return no_json(path)
    if name in GLOBAL_OPTIONS and path != "mam":
        command = path.removeprefix("mam ")
        return MamError("usage", f"No such option of {path}: {name}",
                        hint=f"{name} is mam's own option: put it before the command, `mam {name} ... {command}`")
    close = _closest(name, [o for o in options if o.startswith("--")])
    if not close and path == "mam send":  # text that starts with '-' is text, after --
        return MamError("usage", f"No such option: {name}",
                        hint=f"to send text that starts with '-', put it after --: `mam send NAME -- {name}`")
    return MamError("usage", f"No such option: {name}", hint=f"did you mean {close}?" if close else
                    f"run '{path} --help'")


def _no_such_command(word: str, group: click.Group, path: str) -> MamError:
    close = _closest(word, list(group.commands))
    return MamError("usage", f"No such command {word!r}", hint=f"did you mean {close}?" if close else
                    f"run '{path} --help'")


def from_click(error: click.UsageError, path: str) -> MamError:
    """What click still finds (a missing NAME or --server, a value that is no number) as one line and a hint
    naming the help of the (sub)command at fault (`path` when click does not say)."""
    if error.ctx is not None and error.ctx.command_path:
        path = error.ctx.command_path
    message = " ".join(error.format_message().split()).rstrip(".")
    if isinstance(error, click.NoSuchOption):
        message = f"No such option: {error.option_name}"
    return MamError("usage", message, hint=f"run '{path} --help'")
