"""The page of `mam serve` in a real browser: Debian's Chromium driven by Playwright for Python (its own browser
downloads cannot be reached here, so `executable_path`), against a real `mam serve` process over a real tmux
fleet. A person opens the page, sees the blocked agent first, reads its question, answers it and sees it leave
`blocked`; a stop asks first, naming the agent; with --read-only there is no control that changes anything; on
a phone's screen the agents stand in one column.

The screenshots go to $MAM_SERVE_SHOTS (docs/ when they are remade for the README), else the test's folder."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import Tmux, Workspace

CHROMIUM = os.environ.get("MAM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # said by `browser` below; the page's own checks run without it
    pass


def _missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"no chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it)"
    if "sync_playwright" not in globals():
        return "playwright for Python is not installed (pip install -e '.[test]')"
    for library in ("starlette", "uvicorn", "prometheus_client"):
        try:
            __import__(library)
        except ImportError:
            return f"mam serve needs {library}, not installed (pip install -e '.[web]')"
    return None


browser_test = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")
# Chromium as a test wants it: headless, nothing fetched from anywhere (updates, sync, QUIC probes), no proxy
# between it and the loopback server.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-proxy-server", "--disable-dev-shm-usage"]
WAIT = 60_000  # ms: a loaded 2-core machine, a poller at top's pace, tmux servers starting


def shots(tmp_path: Path) -> Path:
    return Path(os.environ.get("MAM_SERVE_SHOTS") or tmp_path)


def spawn(ws: Workspace, name: str, server: str, kind: str | None, *args: str) -> None:
    agent = ["--agent", kind] if kind else []
    proc = ws.mam("spawn", name, *agent, "--server", server, "--command", sys.executable, "--", STANDIN, *args)
    assert proc.returncode == 0, proc.stderr


def screen(tmux: Tmux, server: str, target: str) -> str:
    return tmux.run(server, "capture-pane", "-p", "-t", target).stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(ok: Callable[[], bool], limit: float = 60) -> bool:
    deadline = time.monotonic() + limit
    while not ok():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@contextmanager
def served(ws: Workspace, tmp_path: Path, *flags: str, port: int = 0) -> Iterator[str]:
    """A real `mam serve` on a loopback port (a free one unless given), its URL once it answers; ended by its
    pid."""
    port = port or free_port()
    log = (tmp_path / f"serve-{port}.log").open("a")
    proc = subprocess.Popen([sys.executable, "-m", "mam", "serve", "--bind", f"127.0.0.1:{port}", *flags],
                            env=ws.env, cwd=ws.root, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}/"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never through a proxy

    def answers() -> bool:
        if proc.poll() is not None:
            return True
        try:
            with direct.open(url + "api/session", timeout=5) as response:
                return bool(response.status == 200)
        except urllib.error.HTTPError:  # it answers: 401 when a token is asked
            return True
        except OSError:
            return False

    try:
        assert until(answers), "mam serve did not answer in time"
        assert proc.poll() is None, (tmp_path / f"serve-{port}.log").read_text()
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, each time on a fresh profile (Playwright makes one per launch, and removes it)."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def watch_errors(page: Page) -> list[str]:
    """What the page's script threw, what the browser refused (a CSP violation is a console error), and any
    request of the page's own that failed; an action's refusal (a 4xx from /api/agents/) is the page's to show."""
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text)
            if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}")
            if r.status >= 400 and "/api/agents/" not in r.url else None)
    return errors


def names(page: Page) -> list[str]:
    """The agents as the page lists them, top to bottom: the live ones, then the ended ones."""
    found: list[str] = page.eval_on_selector_all("tr.agent", "rows => rows.map(r => r.dataset.name)")
    return found


def state_of(page: Page, name: str) -> str | None:
    found: str | None = page.evaluate(
        "name => { const r = [...document.querySelectorAll('tr.agent')].find(t => t.dataset.name === name);"
        " return r ? r.dataset.state : null; }", name)
    return found


def fleet(ws: Workspace, tmux: Tmux) -> tuple[str, str]:
    """Five agents on two tmux servers: one blocked (answered by typing 1), one working, one idle, one whose
    session is gone (to restore), one stopped (ended, below the rest)."""
    one, two = tmux.name(), tmux.name()
    spawn(ws, "worker", one, "claude", "claude", "working")
    spawn(ws, "zasker", one, "codex", "codex", "blocked", "--then", "idle", "--when-typed", "1")
    spawn(ws, "idler", two, "gemini", "gemini", "idle")
    spawn(ws, "dead", two, "gemini", "gemini", "idle")
    spawn(ws, "retired", two, "claude", "claude", "idle")
    tmux.run(two, "kill-session", "-t", "=dead")  # its row still says running: a dead agent to restore
    proc = ws.mam("stop", "retired")
    assert proc.returncode == 0, proc.stderr
    return one, two


@browser_test
@pytest.mark.slow
@pytest.mark.tmux
def test_page_shows_the_blocked_agent_first_and_answers_it(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    one, two = fleet(ws, tmux)
    with served(ws, tmp_path) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors = watch_errors(page)
        page.goto(url)
        expect(page.locator("#link")).to_have_text("live", timeout=WAIT)
        # The one that needs a person first, the ended one last, below its own heading.
        page.wait_for_function("() => { const r = document.querySelector('#live tr.agent');"
                               " return r && r.dataset.name === 'zasker' && r.dataset.state === 'blocked'; }",
                               timeout=WAIT)
        page.wait_for_function("() => document.querySelectorAll('tr.agent').length === 5", timeout=WAIT)
        assert names(page)[0] == "zasker" and names(page)[-1] == "retired", names(page)
        assert page.locator("#ended tr.agent").count() == 1
        expect(page.get_by_role("rowheader", name="Ended")).to_be_visible()
        expect(page.locator("#counts")).to_contain_text("1 blocked")
        # What it asks, on its row; the controls each name their agent; only the dead one is restored.
        expect(page.locator("tr.state-blocked .why")).to_contain_text("Press enter to confirm")
        expect(page.get_by_role("button", name="Restore dead")).to_be_visible()
        assert page.get_by_role("button", name="Restore worker").count() == 0
        assert page.get_by_role("button", name="Answer worker").count() == 0
        page.wait_for_function("() => document.querySelector('tr.agent[data-name=worker]').dataset.state"
                               " === 'working'", timeout=WAIT)
        page.screenshot(path=str(shots(tmp_path) / "serve-1280x800.png"))

        # Peek: the cleaned screen text, as text.
        page.get_by_role("button", name="Peek zasker").click()
        expect(page.locator("#peek-text")).to_contain_text("npm run test:e2e", timeout=WAIT)
        assert "\x1b" not in page.locator("#peek-text").inner_text()
        page.get_by_role("button", name="Close").click()
        expect(page.locator("#peek")).not_to_be_visible()

        # A prompt to the blocked agent is refused as `mam send` refuses it; the error said in the dialog.
        page.get_by_role("button", name="Send zasker").click()
        page.get_by_role("textbox", name="Prompt").fill("hello")
        page.locator("#ask-ok").click()
        expect(page.locator("#ask-error")).to_contain_text("blocked", timeout=WAIT)
        page.get_by_role("button", name="Cancel").click()
        assert "got: hello" not in screen(tmux, one, "zasker")

        # Answer: the question shown, the answer typed, the agent leaves blocked.
        kept = page.get_by_role("button", name="Stop worker").element_handle()  # another row's, to be left alone
        page.get_by_role("button", name="Answer zasker").click()
        expect(page.locator("#ask-question")).to_contain_text("Would you like to run the following command?",
                                                              timeout=WAIT)
        expect(page.locator("#ask-question")).to_contain_text("> " + "  Press enter to confirm")
        page.screenshot(path=str(tmp_path / "serve-answer.png"))  # to look at when this fails
        page.get_by_role("textbox", name="Your answer").fill("1")
        page.get_by_role("textbox", name="Your answer").press("Enter")
        expect(page.locator("#ask")).not_to_be_visible(timeout=WAIT)
        expect(page.locator("#said")).to_contain_text("answered zasker")
        assert until(lambda: "got: 1" in screen(tmux, one, "zasker"), 30), screen(tmux, one, "zasker")
        page.wait_for_function("() => { const r = [...document.querySelectorAll('tr.agent')]"
                               ".find(t => t.dataset.name === 'zasker'); return r && r.dataset.state !== 'blocked'; }",
                               timeout=WAIT)
        assert state_of(page, "zasker") != "blocked"
        assert page.get_by_role("button", name="Answer zasker").count() == 0
        # The documents since then changed another row's state and every age: its buttons are the same elements
        # (a click in progress, or the keyboard's focus, is never lost to an update).
        assert kept.evaluate("b => b.isConnected")

        # Stop asks first, naming the agent: keeping it running stops nothing; yes stops it.
        page.get_by_role("button", name="Stop worker").click()
        expect(page.locator("#confirm")).to_contain_text("worker")
        page.get_by_role("button", name="Keep it running").click()
        assert "worker" in tmux.run(one, "list-sessions", "-F", "#{session_name}").stdout
        page.get_by_role("button", name="Stop worker").click()
        page.locator("#confirm-ok").click()
        expect(page.locator("#said")).to_contain_text("stopped worker", timeout=WAIT)
        page.wait_for_function("() => [...document.querySelectorAll('#ended tr.agent')]"
                               ".some(t => t.dataset.name === 'worker')", timeout=WAIT)

        # What an agent shows is text, never markup: a line of HTML typed into one comes back as that text.
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        hostile = "<img src=x onerror=alert(1)><script>alert(2)</script>"
        page.get_by_role("button", name="Send idler").click()
        page.get_by_role("textbox", name="Prompt").fill(hostile)
        page.get_by_role("textbox", name="Prompt").press("Enter")
        expect(page.locator("#said")).to_contain_text("sent to idler", timeout=WAIT)
        assert until(lambda: "got: <img src=x" in screen(tmux, two, "idler"), 30), screen(tmux, two, "idler")
        page.get_by_role("button", name="Peek idler").click()
        expect(page.locator("#peek-text")).to_contain_text("got: " + hostile, timeout=WAIT)
        assert page.locator("img, #peek-text script, #peek-text *").count() == 0
        assert dialogs == []
        assert errors == [], errors


@browser_test
@pytest.mark.slow
@pytest.mark.tmux
def test_read_only_page_has_no_action(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    one, two = fleet(ws, tmux)
    with served(ws, tmp_path, "--read-only") as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors = watch_errors(page)
        page.goto(url)
        page.wait_for_function("() => document.querySelectorAll('tr.agent').length === 5"
                               " && document.querySelector('#live tr.agent').dataset.state === 'blocked'",
                               timeout=WAIT)
        expect(page.locator("#who")).to_contain_text("read-only")
        # The views only: peek is there, nothing that changes an agent is, for any agent.
        expect(page.get_by_role("button", name="Peek zasker")).to_be_visible()
        buttons: list[str] = page.eval_on_selector_all(
            "button", "bs => bs.filter(b => b.offsetParent !== null)"
                      ".map(b => b.getAttribute('aria-label') || b.textContent)")
        assert buttons and all(label.startswith("Peek ") for label in buttons), buttons
        assert page.locator("input:visible, textarea:visible, form:visible").count() == 0
        # And the server refuses what the page does not offer: the agent still blocked, nothing typed.
        status: int = page.evaluate(
            "async () => { const s = await (await fetch('/api/session')).json();"
            " const r = await fetch('/api/agents/zasker/answer', {method: 'POST', headers: {'Content-Type':"
            " 'application/json', 'X-CSRF-Token': s.csrf || ''}, body: JSON.stringify({text: '1'})});"
            " return r.status; }")
        assert status == 403
        assert "got: 1" not in screen(tmux, one, "zasker")

        # A server that cannot be asked is named, with when it last answered; its agents keep their rows.
        tmux.run(two, "kill-server")
        box = page.locator("#servers-box")
        expect(box).to_be_visible(timeout=WAIT)
        expect(box).to_contain_text(f"tmux server {two}")
        expect(box).to_contain_text(re.compile(r"last seen \d+[smhd] ago"))
        page.screenshot(path=str(tmp_path / "serve-down.png"))  # to look at when this fails
        assert "idler" in names(page)
        assert errors == [], errors


@browser_test
@pytest.mark.slow
@pytest.mark.tmux
def test_phone_shows_one_column(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    fleet(ws, tmux)
    with served(ws, tmp_path) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True,
                                has_touch=True)
        errors = watch_errors(page)
        page.goto(url)
        page.wait_for_function("() => document.querySelectorAll('tr.agent').length === 5"
                               " && document.querySelector('#live tr.agent').dataset.state === 'blocked'",
                               timeout=WAIT)
        expect(page.locator("#link")).to_have_text("live", timeout=WAIT)
        boxes: list[dict[str, Any]] = page.eval_on_selector_all(
            "tr.agent", "rows => rows.map(r => { const b = r.getBoundingClientRect();"
                        " return {x: b.x, y: b.y, w: b.width, h: b.height}; })")
        # One card under another, each as wide as the screen less its margins, nothing wider than the screen.
        assert len(boxes) == 5
        assert all(abs(b["x"] - boxes[0]["x"]) < 1 and b["w"] > 330 for b in boxes), boxes
        assert all(a["y"] + a["h"] <= b["y"] + 1 for a, b in zip(boxes, boxes[1:], strict=False)), boxes
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        # The column headers are gone from sight; the numbers say their column.
        head = page.locator("thead").bounding_box()
        assert head is not None and head["height"] <= 1 and head["width"] <= 1, head  # for screen readers only
        labels: list[str] = page.eval_on_selector_all(
            "#live tr.agent:first-child td", "tds => tds.map(td => getComputedStyle(td, '::before').content)")
        assert '"Age "' in labels and '"For "' in labels, labels
        expect(page.get_by_role("button", name="Answer zasker")).to_be_in_viewport()
        page.screenshot(path=str(shots(tmp_path) / "serve-390x844.png"))
        assert errors == [], errors


@browser_test
@pytest.mark.slow
@pytest.mark.tmux
def test_login_page_asks_for_the_token(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    spawn(ws, "zasker", tmux.name(), "codex", "codex", "blocked")
    token_file = tmp_path / "token"  # beside the workspace, never inside it
    with served(ws, tmp_path, "--token-file", str(token_file)) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors = watch_errors(page)
        page.goto(url)
        expect(page).to_have_url(re.compile(r"/login$"))
        page.get_by_label("Token").fill("not-the-token-at-all")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("alert")).to_contain_text("Wrong token")
        page.get_by_label("Token").fill(token_file.read_text().strip())
        page.get_by_role("button", name="Log in").click()
        page.wait_for_function("() => { const r = document.querySelector('#live tr.agent');"
                               " return r && r.dataset.name === 'zasker'; }", timeout=WAIT)
        expect(page.locator("#link")).to_have_text("live", timeout=WAIT)
        page.get_by_role("button", name="Log out").click()
        expect(page).to_have_url(re.compile(r"/login$"))
        page.goto(url)
        expect(page).to_have_url(re.compile(r"/login$"))  # the session ended with the logout
        # The failed login's 401s are the test's own doing; nothing else may fail.
        assert [e for e in errors if not e.startswith(("401 ", "303 "))] == [], errors


@browser_test
@pytest.mark.slow
@pytest.mark.tmux
def test_page_comes_back_when_the_server_does(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server = tmux.name()
    spawn(ws, "idler", server, "gemini", "gemini", "idle")
    port = free_port()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        with served(ws, tmp_path, port=port) as url:
            page.goto(url)
            expect(page.locator("#link")).to_have_text("live", timeout=WAIT)
            expect(page.get_by_role("button", name="Send idler")).to_be_visible(timeout=WAIT)
        # The server gone: the page says so and keeps what it showed.
        expect(page.locator("#link")).to_have_attribute("data-state", "down", timeout=WAIT)
        expect(page.get_by_role("button", name="Send idler")).to_be_visible()
        with served(ws, tmp_path, port=port):
            # Back by itself, on the new server's session: an action works without reloading the page.
            expect(page.locator("#link")).to_have_text("live", timeout=WAIT)
            page.get_by_role("button", name="Send idler").click()
            page.get_by_role("textbox", name="Prompt").fill("after the restart")
            page.get_by_role("textbox", name="Prompt").press("Enter")
            expect(page.locator("#said")).to_contain_text("sent to idler", timeout=WAIT)
            assert until(lambda: "got: after the restart" in screen(tmux, server, "idler"), 30)


def test_page_has_no_inline_script_or_style() -> None:
    """The CSP is `script-src 'self'`: an inline script or style would be refused, so there is none to refuse."""
    static = Path(__file__).parent.parent / "mam" / "web" / "static"
    for html in static.glob("*.html"):
        text = html.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)", text), html
        assert "<style" not in text and " style=" not in text and re.search(r"\son\w+=", text) is None, html
    script = (static / "app.js").read_text()
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script and "outerHTML" not in script
