"""The registry of agent sessions, `.mam/agent-sessions.yaml`: the file and its locking (file), the text form mam
writes and reads without a YAML parser (text), and the strict YAML reader for hand-edited files (yamlio).
May import util only. This file hands out file's names; its modules import each other by full name, never
through it."""

from mam.registry.file import (
    ACTIVE_STATUSES as ACTIVE_STATUSES,
)
from mam.registry.file import (
    LEGACY_BACKEND as LEGACY_BACKEND,
)
from mam.registry.file import (
    LEGACY_SESSIONS as LEGACY_SESSIONS,
)
from mam.registry.file import (
    LOCK_TIMEOUT as LOCK_TIMEOUT,
)
from mam.registry.file import (
    MAX_REGISTRY_BYTES as MAX_REGISTRY_BYTES,
)
from mam.registry.file import (
    SESSIONS as SESSIONS,
)
from mam.registry.file import (
    Change as Change,
)
from mam.registry.file import (
    Registry as Registry,
)
from mam.registry.file import (
    Row as Row,
)
from mam.registry.file import (
    RowKey as RowKey,
)
from mam.registry.file import (
    load as load,
)
from mam.registry.file import (
    parse as parse,
)
from mam.registry.file import (
    timestamp as timestamp,
)
from mam.registry.file import (
    update as update,
)
