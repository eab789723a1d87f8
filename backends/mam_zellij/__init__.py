"""The zellij backend of mam: a server is a zellij session, an agent a named pane in it."""
