"""mam-echo: a third-party backend written only against mam's public hooks and records."""
