"""The jobs on agents: state and its sources, rows, status, launch, remains, restore plan, back-off, locks, peek.
May import servers, hooks and every layer below them; never a command, the live model or mam.cli."""
