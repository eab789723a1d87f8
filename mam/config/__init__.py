"""The workspace and its `.mam/config.yaml` (workspace), and mam's $MAM_* settings (settings).
May import registry and util only."""
