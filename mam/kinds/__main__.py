"""`python3 -m mam.kinds`: write agents.json, the JSON twin of agents.yaml, after editing agents.yaml."""

from __future__ import annotations

from mam.kinds.library import write_twin

if __name__ == "__main__":
    print(f"wrote {write_twin()}")
