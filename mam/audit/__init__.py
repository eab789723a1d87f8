"""The audit trail: one JSON line in the workspace's `.mam/audit.jsonl` for every action that changes something,
from any face (the CLI, `mam top`, `mam serve`, the skills), and `mam audit`'s reading of it (mam.audit.trail).
May import mam.util and the standard library only. Only the commands that act load it, so `mam status` never does.

The API the faces use: `Actor(face, user, client=None, token_id=None)`, `acting(actor)` (a context manager: what
runs inside is recorded as that actor's), `current_actor()`, and `record(mam_dir, action, agent, arguments,
result)`; the commands use `audited(action, ...)`, `mam audit` reads it with mam.audit.reading."""

from mam.audit.trail import FACES, Actor, acting, audited, current_actor, os_user, record

__all__ = ["FACES", "Actor", "acting", "audited", "current_actor", "os_user", "record"]
