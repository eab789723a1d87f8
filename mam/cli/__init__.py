"""The command line: a typer app. This package is the only one that parses arguments; the core and the
backends never import typer or click.

typer comes as typer-slim, which needs click and nothing heavier (no rich, no pydantic); the app is built with
`rich_markup_mode=None`, so rich is never imported even where it is installed. What typer and click would
otherwise print their own way (a usage block, "Did you mean", a traceback) goes through mam's one-line errors:
mam/cli/usage.py reads the command line against the click tree first, and mam/cli/main.py turns what is left
into `mam: ...` / `hint: ...` and the exit code.

Start-up is a feature (bench/RESULTS.md): the commands live in small modules that import the core inside each
command, so `mam --help` and `mam version` load neither plugins nor YAML, and `mam status` only what it needs.
The entry point (mam/entry.py) runs mam.cli.main; this file imports nothing, so no module here imports back
through it. The CLI may import every layer below it (tests/test_layers.py).
"""
