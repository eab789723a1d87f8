"""Options that several commands share, declared once."""

from typing import Annotated

import typer

# Where a server runs: an SSH destination as OpenSSH reads it. Commands that act on one server default to
# $MAM_HOST; status keeps the rows of that host only.
Host = Annotated[str | None, typer.Option(
    "--host", metavar="HOST",
    help="the server's host, over ssh: user@h, an ~/.ssh/config alias, h:port; 'local' is this machine "
         "(default $MAM_HOST, else this machine)")]
HostFilter = Annotated[str | None, typer.Option(
    "--host", metavar="HOST", help="only the rows of this host ('local': this machine's)")]
# Every command that can answer a program.
Json = Annotated[bool, typer.Option("--json", help="print one JSON document on stdout")]
