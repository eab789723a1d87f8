"""The audit trail: one JSON line in the workspace's `.mam/audit.jsonl` for every action that changes something,
from any face (the CLI, `mam top`, `mam serve`, the skills), and `mam audit`'s reading of it (mam.audit.trail).
May import mam.util and the standard library only; imports nothing here, so `mam status` never loads it."""
