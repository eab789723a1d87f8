"""One module per command (or per family of small documents): each builds its JSON document through
the hooks, never knowing which backend answers. The CLI (mam/cli/) renders them."""
