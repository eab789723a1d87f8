"""What `mam serve` guards, without a server: the bind address, the token file, the Host names, the lock on a
client that keeps failing, the names a path may give."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mam.util.errors import MamError
from mam.web.guard import LOCK_SECONDS, MAX_FAILURES, Bind, Guard, load_token, name_ok, parse_bind, token_id


def test_bind_addresses() -> None:
    assert parse_bind("127.0.0.1:9000") == Bind("127.0.0.1", 9000)
    assert parse_bind("[::1]:9000") == Bind("::1", 9000)
    assert parse_bind("localhost") == Bind("localhost", 8765)
    assert parse_bind("127.0.0.1:9000").loopback and parse_bind("[::1]:1").loopback
    assert not parse_bind("0.0.0.0:9000").loopback and not parse_bind("192.168.1.2:80").loopback
    for bad in ("127.0.0.1:0", "127.0.0.1:70000", "example.com:80", "[::1", "1.2.3.4:x", "127.0.0.1:²", "[::1]:³"):
        with pytest.raises(MamError) as caught:
            parse_bind(bad)
        assert caught.value.exit_code == 2


def test_hosts_are_the_bound_names_with_the_port() -> None:
    guard = Guard(Bind("127.0.0.1", 9000))
    for host in ("127.0.0.1:9000", "localhost:9000", "LOCALHOST:9000", "[::1]:9000"):
        assert guard.host_ok(host), host
    for host in ("evil.example:9000", "127.0.0.1:9001", "127.0.0.1", "", None, "localhost.evil.example:9000"):
        assert not guard.host_ok(host), host
    assert Guard(Bind("192.168.7.7", 80)).host_ok("192.168.7.7:80")
    assert Guard(Bind("127.0.0.1", 9000)).origin_ok("http://localhost:9000", "localhost:9000")
    assert not Guard(Bind("127.0.0.1", 9000)).origin_ok("http://evil.example", "localhost:9000")
    assert not Guard(Bind("127.0.0.1", 9000)).origin_ok("null", "localhost:9000")


def test_on_port_80_the_browser_names_no_port() -> None:
    """http://127.0.0.1/ is sent as `Host: 127.0.0.1` and `Origin: http://127.0.0.1`: the page must load and act."""
    guard = Guard(Bind("127.0.0.1", 80))
    assert guard.host_ok("127.0.0.1") and guard.host_ok("localhost") and guard.host_ok("127.0.0.1:80")
    assert guard.origin_ok("http://127.0.0.1", "127.0.0.1")
    assert not guard.host_ok("evil.example") and not guard.host_ok("127.0.0.1:8080")


def test_a_token_file_is_made_0600_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "mam" / "serve-token"
    token, made = load_token(path, tmp_path / "project")
    assert made and len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_token(path, tmp_path / "project") == (token, False)
    assert token_id(token) != token and len(token_id(token)) == 8 and token[:8] not in token_id(token)


def test_a_token_file_others_may_read_or_inside_the_workspace_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("a" * 40 + "\n")
    os.chmod(path, 0o644)
    with pytest.raises(MamError, match="others may read it") as refused:
        load_token(path, None)
    # never "chmod 600" alone: the file named may be anything (/etc/passwd, as root, was told to chmod it)
    assert refused.value.hint is not None and "if it holds only your token" in refused.value.hint
    assert "which mam makes" in refused.value.hint
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(MamError, match="not a regular file"):  # at once: a FIFO's open waited for a writer
        load_token(fifo, None)
    os.chmod(path, 0o600)
    assert load_token(path, None) == ("a" * 40, False)
    with pytest.raises(MamError, match="inside the workspace"):
        load_token(path, tmp_path)
    path.write_text("short\n")
    with pytest.raises(MamError, match="16 to 4096"):
        load_token(path, None)


def test_a_token_file_that_cannot_be_made_or_is_a_link_is_bad_input(tmp_path: Path) -> None:
    """Each is one line that names the file and what to do (exit 2), never an internal error."""
    real = tmp_path / "real"
    load_token(real, None)
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "token")
    cases = {tmp_path / "link": "symbolic link", tmp_path / "dangling": "symbolic link",
             real / "under-a-file": "cannot make it"}
    for path, said in cases.items():
        with pytest.raises(MamError) as caught:
            load_token(path, None)
        assert caught.value.exit_code == 2 and said in caught.value.message, (path, caught.value.message)
        assert caught.value.hint, path
    assert not (tmp_path / "nowhere").exists()


def test_failed_logins_lock_an_address_for_a_while() -> None:
    now = [1000.0]
    guard = Guard(Bind("127.0.0.1", 9000), token="t" * 32, clock=lambda: now[0])
    for _ in range(MAX_FAILURES - 1):
        guard.failed("10.0.0.1")
    assert not guard.locked("10.0.0.1")
    guard.failed("10.0.0.1")
    assert guard.locked("10.0.0.1") and not guard.locked("10.0.0.2")
    now[0] += LOCK_SECONDS + 1
    assert not guard.locked("10.0.0.1")
    guard.failed("10.0.0.1")  # the count starts again after a lock
    assert not guard.locked("10.0.0.1")


def test_tokens_compare_whole() -> None:
    guard = Guard(Bind("127.0.0.1", 9000), token="secret-token-0123456789")
    assert guard.token_ok("secret-token-0123456789")
    assert not guard.token_ok("secret-token-012345678") and not guard.token_ok("")
    assert not Guard(Bind("127.0.0.1", 9000)).token_ok("")  # no token configured: no token is right


def test_agent_names_in_a_path() -> None:
    assert name_ok("fixer") and name_ok("a.b-c_d")
    for bad in ("", ".", "..", "a/b", "a\\b", "a\x1bb", "a\nb", "a\x7fb", "x" * 201):
        assert not name_ok(bad), bad


def test_metrics_count_time_in_states_and_blocked_to_answered() -> None:
    from mam.live.topmodel import ServerLine, TopRow
    from mam.web.metrics import Metrics

    def row(state: str, name: str = "a1", ended: bool = False) -> TopRow:
        return TopRow(name, "tmux", "s1", "", "running", "alive", state, "screen", "", ended=ended)

    metrics = Metrics()
    metrics.snapshot([row("working")], [], 100.0)
    metrics.snapshot([row("blocked")], [], 110.0)
    metrics.snapshot([row("blocked")], [ServerLine("tmux", "s2", "", "down", "gone", None)], 130.0)
    metrics.snapshot([row("working"), row("finished", "a2", ended=True)], [], 175.0)
    text = metrics.text().decode()
    assert 'mam_agent_state_seconds_total{state="working"} 10.0' in text
    assert 'mam_agent_state_seconds_total{state="blocked"} 65.0' in text
    assert "mam_blocked_to_answered_seconds_count 1.0" in text and "mam_blocked_to_answered_seconds_sum 65.0" in text
    assert 'mam_agents{backend="tmux",host="local",server="s1",state="working"} 1.0' in text
    assert 'mam_agents{backend="tmux",host="local",server="s1",state="finished"} 1.0' in text
    assert 'state="blocked"} 1.0' not in text.split("mam_agents{", 1)[1].split("# HELP", 1)[0]  # the gone label
    assert 'mam_servers{state="up"} 1.0' in text and 'mam_servers{state="down"} 0.0' in text
    metrics.restored({"agents": [{"outcome": "restored"}, {"outcome": "skipped", "reason": "crash_loop"}]})
    text = metrics.text().decode()
    assert "mam_restores_total 1.0" in text and "mam_crash_loops_total 1.0" in text
