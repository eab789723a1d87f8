"""The tmux backend of mam: a server is a tmux socket name (`tmux -L NAME`), an agent a tmux session on it."""

# What tmux sets in its panes: never passed on to a server or an agent mam starts. Here, below plugin.py (the
# BackendSpec declares them) and backend.py (its calls leave them out), so neither imports the other for them.
MARKERS = ("TMUX", "TMUX_PANE")
