"""One module per command (or per family of small documents): each builds its JSON document through
the hooks, never knowing which backend answers. The CLI (mam/cli/) renders them. No command imports another:
what two commands share lives in a module below them (mam/<job>.py; tests/test_layers.py checks it)."""
