"""The live model of `mam top` and `mam watch`: rows, columns, poller (topmodel), changes, notices (notify).
May import the layers below it (agents and down); never a command, mam.cli or a terminal library."""
