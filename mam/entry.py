"""The `mam` command's entry point. `mam report STATE`, which agents' hooks run inside their turns, is answered
here before the command line's framework is imported (mam.hooks.report); everything else goes to mam.cli."""

from __future__ import annotations

import sys
from typing import NoReturn


def main(argv: list[str] | None = None) -> NoReturn:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["report"] and args[1:2] and args[1] not in ("-h", "--help", "--json"):
        from mam.hooks.report import main as report  # start-up: the hooks' fast path loads nothing else

        sys.exit(report(list(args[1:])))
    from mam.cli.main import main as run  # start-up: typer, only when it is not `mam report`

    run(argv)
