"""Validation of the names mam hands to a backend (server names, registry row names and host names)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache

from mam.util.errors import MamError
from mam.util.quote import shown

# docs/cli.md, "Names": starts with a letter or digit, so it can never read as an option or a shell word.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# An agent's own session id that mam hands back to it on resume (`--resume ID`): one plain word that no agent
# reads as an option or a path (a UUID, `ses_01J...`, `019a-77c1`).
SESSION_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

LOCAL = "local"  # the `host:` value (like an empty or absent one) that means this machine
# A destination OpenSSH reads as a destination and nothing else: [user@]name[:port], [user@][v6][:port] or a
# bare IPv6 address. Never a leading '-' (an option), no whitespace, quote, '%' (a ssh token), '/' (ssh://...).
_USER = r"(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,63}@)?"
_PORT = r"(?::(?P<port>[0-9]{1,5}))?"
_HOST = (_USER + r"(?:(?P<name>[A-Za-z0-9_][A-Za-z0-9._-]{0,252})" + _PORT
         + r"|\[(?P<v6b>[0-9A-Fa-f:.]{2,45})\](?::(?P<port6>[0-9]{1,5}))?"
         + r"|(?P<v6>[0-9A-Fa-f]*:[0-9A-Fa-f]*:[0-9A-Fa-f:.]*))")


def is_valid_name(name: object) -> bool:
    return isinstance(name, str) and NAME_PATTERN.fullmatch(name) is not None


def closest(word: str, known: Sequence[str], cutoff: float = 0.6) -> str | None:
    """The one of `known` that `word` is most likely a typo of (`runing`: `running`), or None. Bounded: only
    the first 100 characters of a word are compared, whatever its length."""
    import difflib  # only on the error path

    close = difflib.get_close_matches(word[:100], list(known), n=1, cutoff=cutoff)
    return close[0] if close else None


def check_name(name: str, what: str = "name") -> str:
    """Return `name` unchanged, or raise `invalid_name` before anything reaches a backend."""
    if not is_valid_name(name):
        raise MamError(
            "invalid_name",
            f"invalid {what} {shown(name, quote='repr', cut='value')}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
        )
    return name


@cache
def _host_pattern() -> re.Pattern[str]:
    return re.compile(_HOST)  # compiled on first use: it costs 0.6 ms, and most commands meet no host


def match_host(host: str) -> re.Match[str] | None:
    """`host` read as an ssh destination: groups user@ (in the match), name, v6b or v6, and port or port6."""
    return _host_pattern().fullmatch(host)


def is_local(host: str | None) -> bool:
    return host is None or host in ("", LOCAL)


def check_host(host: str) -> str:
    """`host` unchanged when ssh can only read it as a destination; LOCAL for this machine ("" or "local").
    Anything else (an option, whitespace, a control character, shell or ssh syntax) is a usage error."""
    if is_local(host):
        return LOCAL
    if host.startswith("-"):
        problem = "it begins with '-', which ssh would read as an option"
    elif any(ch.isspace() or not ch.isprintable() for ch in host):
        problem = "it contains whitespace or a control character"
    else:
        match = match_host(host)
        port = match and (match["port"] or match["port6"])
        if match is None:
            problem = "expected [user@]host[:port], an ssh_config alias or an IP address"
        elif port and not 0 < int(port) < 65536:
            problem = f"port {port} is not between 1 and 65535"
        else:
            return host
    raise MamError("usage", f"invalid host {shown(host, quote='repr', cut='value')}: {problem}")


def is_utf8(value: str) -> bool:
    """Whether `value` is UTF-8 text: bytes that are not arrive from argv, a file or the environment as
    surrogates, which no backend, pane or registry can take."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_utf8(value: str, what: str) -> str:
    """`value` when it is UTF-8 text (is_utf8); else refused (usage) naming `what`, the bad bytes written out."""
    if not is_utf8(value):
        raise MamError("usage", f"{what} {shown(value)}: not UTF-8 text",
                       hint="give it as UTF-8 (each \\udcXX is a byte XX that is not)")
    return value
