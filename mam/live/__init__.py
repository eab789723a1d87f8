"""The live model of `mam top`, `mam watch` and `mam serve`: rows, columns, poller (topmodel), changes, notices
(notify), and what a live face's keys and buttons do (actions), each through the code of its CLI command. May import
the commands and the layers below them; never mam.cli, mam.web or a terminal library."""
