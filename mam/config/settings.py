"""mam's settings read from the environment ($MAM_TIMEOUT, $MAM_MAX_OUTPUT, ...): each a clear usage error when
out of bounds, never a silent default for a value that was given."""

from __future__ import annotations

from collections.abc import Mapping

from mam.util.errors import MamError

DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_OUTPUT = 16 * 1024 * 1024  # bytes of one backend call's answer (mam.calls.runner)
MAX_OUTPUT_BOUNDS = (4096, 1024 ** 3)


def max_output_from_env(env: Mapping[str, str]) -> int:
    """$MAM_MAX_OUTPUT: bytes, or with a K, M or G suffix (KiB, MiB, GiB); a usage error when out of bounds."""

    raw = env.get("MAM_MAX_OUTPUT")
    if raw is None or raw == "":
        return DEFAULT_MAX_OUTPUT
    units = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    digits, unit = (raw[:-1], raw[-1].upper()) if raw[-1:].upper() in ("K", "M", "G") else (raw, "")
    value = int(digits) * units[unit] if digits.isascii() and digits.isdigit() and len(digits) <= 12 else -1
    low, high = MAX_OUTPUT_BOUNDS
    if not low <= value <= high:
        raise MamError("usage", f"$MAM_MAX_OUTPUT={raw[:40]}: expected a number of bytes (K, M or G suffix "
                       "allowed), at least 4K and at most 1G")
    return value


def timeout_from_env(env: Mapping[str, str], var: str = "MAM_TIMEOUT", default: float = DEFAULT_TIMEOUT) -> float:
    raw = env.get(var)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise MamError("usage", f"${var}={raw}: expected a number of seconds, more than 0 and at most 3600")
    return value
