"""`python3 -m mam.kinds`: write agents.json, the JSON twin of agents.yaml, after editing agents.yaml."""

from __future__ import annotations

from mam.kinds.library import _shipped_path, _twin_path, twin_text


def main() -> None:
    _twin_path().write_text(twin_text(_shipped_path().read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {_twin_path()}")


if __name__ == "__main__":
    main()
