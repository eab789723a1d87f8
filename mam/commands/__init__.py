"""One module per command (or per family of small documents): each builds its JSON document through
the hooks, never knowing which backend answers. The CLI (mam/cli/) renders them. No command imports another:
what two commands share lives in a layer below them (mam/agents/, mam/servers/, ...; tests/test_layers.py).
May import agents, servers, hooks and every layer below; never the CLI, the live model or another command."""
