"""The zellij backend of mam: a server is a zellij session, an agent a named pane in it."""

# What zellij sets in its panes: never passed on to a server or an agent mam starts. Here, below plugin.py (the
# BackendSpec declares them) and backend.py (its calls leave them out), so neither imports the other for them.
MARKERS = ("ZELLIJ", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID")
