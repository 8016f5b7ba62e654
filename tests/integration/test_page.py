"""The owner page on real parts: a real ``connectd serve`` on a private tmux server with stand-in agents
(``tests/support/daemon.py``), Debian's chromium driven by Playwright (``tests/support/browser.py``),
the agents acting over MCP with the SDK's own client.

The security tests that need no browser run everywhere; the browser tests fail, naming the command
that installs it, when Playwright or /usr/bin/chromium is missing (``make test`` installs chromium when
run as root): a fresh machine never passes by skipping them. The screenshots go to ``$CONNECT_SCREENSHOT_DIR``
(``docs/screenshots`` to refresh the committed ones), else to the test's temporary directory.

One daemon serves the whole module (its start and the browser's are the slow parts); each test
launches the agents it needs, so no test depends on another's agents. The two tests that touch
every agent (disconnect all, the daemon restart) run last.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from connectd.edges.http.page import SESSIONS_FILE, PageSessions, cookie_name
from tests.support import browser as B
from tests.support.daemon import AgentHandle, DaemonProcess, call, mcp_agent, wait_for
from tests.support.fixtures import free_port, running_daemon, tmux_session
from tests.support.tmux_server import TmuxServer

pytestmark = pytest.mark.timeout(120)

BROWSER_MISSING = B.missing()
needs_browser = pytest.mark.usefixtures("browser")  # a missing browser fails these tests, naming the fix

MARKUP = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b>bold</b> & <i>run the tests</i>\nthen report'
WAIT_MS = 15_000


# --------------------------------------------------------------------------------------------------
# Fixtures: one tmux server, one daemon (on a fixed port, so a restart keeps the page's origin), one
# browser for the module
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tmux() -> Iterator[TmuxServer]:
    with tmux_session("connect-page") as server:
        yield server


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, tmux: TmuxServer) -> Iterator[DaemonProcess]:
    port = free_port()
    tmp = tmp_path_factory.mktemp("page")
    wrapper = json.dumps(str(tmp / "bin" / "claude"))  # the stand-in DaemonProcess installs
    launchers = (  # two launchers Connect cannot be offered for
        f'[launchers.mine]\ncommand = {json.dumps("exec " + json.loads(wrapper))}\n'
        f'[launchers.noresume]\nharness = "claude"\nargv = [{wrapper}]\nresume = []\n'
    )
    with running_daemon(tmp, tmux, launchers=launchers, extra_args=("--port", str(port))) as d:
        yield d


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if BROWSER_MISSING is not None:
        pytest.fail(f"the owner page's browser tests cannot run: {BROWSER_MISSING}", pytrace=False)
    with B.launch() as b:
        yield b


def login_code(daemon: DaemonProcess) -> str:
    return str(daemon.api("POST", "/api/login-codes", {})["code"])


class Page:
    """A logged-in page (a fresh browser context) and the handles a test needs."""

    def __init__(self, browser: Any, daemon: DaemonProcess, *, viewport: dict[str, int] | None = None, dark: bool = False, url: str | None = None) -> None:
        self.daemon = daemon
        self.context = B.new_context(browser, viewport=viewport, dark=dark)
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", lambda msg: "Content Security Policy" in msg.text and self.errors.append(msg.text))
        self.page.goto(url or f"{daemon.base_url}/login?code={login_code(daemon)}")
        self.page.wait_for_url(f"{daemon.base_url}/")
        self.wait_live()

    def wait_live(self, timeout: int = WAIT_MS) -> None:
        self.page.wait_for_selector("#live[data-state=live]", timeout=timeout)

    def agent(self, pane: str) -> Any:
        return self.page.locator(f'#agents > li[data-pane="{pane}"]')

    def facts(self, pane: str) -> Any:
        """The agent's facts, unfolded (a phone folds them under Details; they stay open once opened)."""
        fold = self.agent(pane).locator("details.facts-fold")
        fold.wait_for(state="attached")
        if fold.get_attribute("open") is None:
            fold.locator("summary").click()
        return fold

    def preset_button(self, pane: str, preset: str) -> Any:
        return self.agent(pane).locator(f'button[data-preset="{preset}"]')

    def cards(self) -> Any:
        return self.page.locator("#cards > li")

    def card_for(self, text: str) -> Any:
        return self.page.locator("#cards > li", has=self.page.get_by_text(text, exact=False))

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser: Any, daemon: DaemonProcess) -> Iterator[Page]:
    p = Page(browser, daemon)
    try:
        yield p
        assert not p.errors, p.errors  # uncaught exceptions in the page's script, CSP violations
    finally:
        p.close()


_pool = ThreadPoolExecutor(max_workers=2)


def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run an async agent call on its own event loop (Playwright's sync API holds this thread's loop)."""
    return _pool.submit(anyio.run, fn, *args).result(timeout=60)


def agent_call(daemon: DaemonProcess, agent: AgentHandle, tool: str, **args: Any) -> tuple[bool, Any]:
    async def go() -> tuple[bool, Any]:
        async with mcp_agent(daemon.mcp_url, agent.token or "") as client:
            return await call(client, tool, **args)

    return in_thread(go)  # type: ignore[no-any-return]


def agent_calls(daemon: DaemonProcess, agent: AgentHandle, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, Any]]:
    async def go() -> list[tuple[bool, Any]]:
        async with mcp_agent(daemon.mcp_url, agent.token or "") as client:
            return [await call(client, tool, **args) for tool, args in calls]

    return in_thread(go)  # type: ignore[no-any-return]


def send(daemon: DaemonProcess, sender: AgentHandle, to: AgentHandle, text: str, message_id: str) -> dict[str, Any]:
    err, sent = agent_call(daemon, sender, "send_message", to=to.address, text=text, message_id=message_id)
    assert not err and sent["outcome"] == "queued", sent
    return sent  # type: ignore[no-any-return]


def outcome(daemon: DaemonProcess, sender: AgentHandle, message_id: str) -> str:
    err, payload = agent_call(daemon, sender, "get_message", message_id=message_id)
    assert not err, payload
    return str(payload["outcome"])


def fleet(daemon: DaemonProcess, *names: str, connect: str = "collaborate", **extra: Any) -> list[AgentHandle]:
    handles = [daemon.launch(f"{n}-{uuid.uuid4().hex[:4]}", connect, **extra) for n in names]
    for handle in handles:
        daemon.wait_ready(handle)
    return handles


def card_id_for(daemon: DaemonProcess, message_id: str) -> str:
    card = wait_for(lambda: next((c for c in daemon.cards() if c["message_id"] == message_id), None), 10, f"the card of {message_id}")
    return str(card["id"])


# --------------------------------------------------------------------------------------------------
# Security without a browser: login, cookie, CSRF
# --------------------------------------------------------------------------------------------------


def test_without_login_nothing_works(daemon: DaemonProcess) -> None:
    a, = fleet(daemon, "nologin")
    with httpx2.Client(base_url=daemon.base_url, timeout=10) as anon:
        page = anon.get("/")
        assert page.status_code == 401 and f"token --data-dir {daemon.data_dir}" in page.text
        assert a.pane not in page.text and "csrf-token" not in page.text  # no data, no token
        assert "default-src 'none'" in page.headers["content-security-policy"]
        for method, path in [("GET", "/api/agents"), ("GET", "/api/cards"), ("GET", "/api/audit"), ("GET", "/api/events"),
                             ("POST", "/api/disconnect-all"), ("POST", "/api/login-codes"), ("POST", "/logout")]:
            response = anon.request(method, path, json={} if method == "POST" else None)
            assert response.status_code == 401, (method, path, response.text)
        bad = anon.get("/login", params={"code": "not-a-code-that-was-ever-issued"})
        assert bad.status_code == 401 and f"token --data-dir {daemon.data_dir}" in bad.text and "set-cookie" not in bad.headers
    with httpx2.Client(base_url=daemon.base_url, timeout=10, cookies={cookie_name(daemon.port): "x" * 43}) as forged_client:
        forged = forged_client.get("/api/agents")
        assert forged.status_code == 401 and forged.json()["error"] == "session_expired"
    assert daemon.agent_view(a.pane)["connect"] == "collaborate"  # the refused POST changed nothing
    err, _ = agent_call(daemon, a, "whoami")
    assert not err


def test_login_code_is_single_use_and_gives_a_strict_httponly_cookie_whose_posts_need_the_csrf_token(daemon: DaemonProcess) -> None:
    a, = fleet(daemon, "csrf")
    with httpx2.Client(base_url=daemon.base_url, timeout=10) as anon:
        assert anon.post("/api/login-codes", json={}, headers={"Authorization": f"Bearer {a.token}"}).status_code == 403  # an agent's token
        assert anon.post("/api/login-codes", json={"ttl": 1}, headers={"Authorization": f"Bearer {daemon.owner_token}"}).status_code == 400
    minted = daemon.api("POST", "/api/login-codes", {})
    assert minted["url"] == f"{daemon.base_url}/login?code={minted['code']}" and 0 < minted["expires_in"] <= 600
    with httpx2.Client(base_url=daemon.base_url, timeout=10) as browser_like:
        response = browser_like.get("/login", params={"code": minted["code"]})
        assert response.status_code == 303 and response.headers["location"] == "/"
        cookie = response.headers["set-cookie"]
        attributes = {part.strip().split("=")[0].lower(): part.strip() for part in cookie.split(";")}
        assert cookie.startswith(cookie_name(daemon.port) + "=")
        assert "httponly" in attributes and attributes["samesite"].lower() == "samesite=strict" and attributes["path"] == "Path=/"
        again = httpx2.get(f"{daemon.base_url}/login", params={"code": minted["code"]}, timeout=10)
        assert again.status_code == 401 and "set-cookie" not in again.headers  # single use
        index = browser_like.get("/")
        assert index.status_code == 200 and index.headers["x-frame-options"] == "DENY"
        csrf = re.search(r'<meta name="csrf-token" content="([^"]+)">', index.text)
        assert csrf and len(csrf.group(1)) >= 32
        assert browser_like.get("/api/agents").status_code == 200  # reads need no token
        no_token = browser_like.post("/api/disconnect-all", json={})
        wrong = browser_like.post("/api/disconnect-all", json={}, headers={"X-CSRF-Token": ("y" if csrf.group(1)[0] == "x" else "x") + csrf.group(1)[1:]})
        assert (no_token.status_code, no_token.json()["error"]) == (403, "csrf")
        assert (wrong.status_code, wrong.json()["error"]) == (403, "csrf")
        assert daemon.agent_view(a.pane)["connect"] == "collaborate"  # refused before anything ran
        ok = browser_like.post("/api/login-codes", json={}, headers={"X-CSRF-Token": csrf.group(1)})
        assert ok.status_code == 200
        # the session is kept by digest only, 0600; logging out ends it
        stored = daemon.data_dir / SESSIONS_FILE
        value = cookie.split(";", 1)[0].split("=", 1)[1]
        assert stat.S_IMODE(stored.stat().st_mode) == 0o600 and value not in stored.read_text()
        out = browser_like.post("/logout", json={}, headers={"X-CSRF-Token": csrf.group(1)})
        assert out.status_code == 200
        with httpx2.Client(base_url=daemon.base_url, timeout=10, cookies={cookie_name(daemon.port): value}) as ended:
            assert ended.get("/api/agents").status_code == 401
    rows = daemon.api("GET", "/api/audit?actor=owner:page:*&limit=1000")
    assert {("login", "done"), ("logout", "done")} <= {(r["action"], r["outcome"]) for r in rows}
    assert len({r["actor"] for r in rows if r["action"] == "login"}) >= 1
    # the reused code is refused and audited, but never as the owner: whoever sent it is not known
    refused = daemon.api("GET", "/api/audit?actor=anonymous&limit=1000")
    assert ("login", "refused") in {(r["action"], r["outcome"]) for r in refused}
    assert all(r["outcome"] != "refused" for r in rows)


def test_codes_and_sessions_expire_and_sessions_survive_a_new_process(tmp_path: Path) -> None:
    now = [1000.0]
    path = tmp_path / SESSIONS_FILE
    sessions = PageSessions(path, clock=lambda: now[0], code_ttl=60, session_ttl=3600)
    stale, _ = sessions.new_code()
    fresh, _ = sessions.new_code()
    now[0] += 61
    assert sessions.redeem(stale) is None  # expired
    assert sessions.redeem(fresh) is None  # also minted 61 s ago
    code, _ = sessions.new_code()
    redeemed = sessions.redeem(code)
    assert redeemed is not None and sessions.redeem(code) is None  # once
    value, session = redeemed
    reloaded = PageSessions(path, clock=lambda: now[0], session_ttl=3600)  # the next daemon
    assert reloaded.session_for(value) == session
    assert reloaded.session_for(value[:-1] + ("A" if value[-1] != "A" else "B")) is None
    now[0] += 3601
    assert reloaded.session_for(value) is None  # expired
    assert sessions.redeem("short") is None and sessions.redeem("../" * 10) is None  # malformed codes


# --------------------------------------------------------------------------------------------------
# In the browser
# --------------------------------------------------------------------------------------------------


@needs_browser
def test_screenshots_phone_and_desktop_light_and_dark(browser: Any, daemon: DaemonProcess, tmux: TmuxServer, tmp_path: Path) -> None:
    """Runs first among the browser tests, so the fleet in the pictures is small."""
    out = Path(os.environ.get("CONNECT_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    planner, builder = fleet(daemon, "planner", "builder")
    reviewer, = fleet(daemon, "reviewer", connect="observe")
    docs, = fleet(daemon, "docs", connect="off")
    for agent, title in [(planner, "planner: auth refactor"), (builder, "builder: run the tests"), (reviewer, "reviewer"), (docs, "docs writer")]:
        tmux.tmux("select-pane", "-t", agent.pane, "-T", title)
    send(daemon, planner, builder, "Pull the auth branch and run the unit tests.", "m-shot-1")
    daemon.api("POST", f"/api/cards/{card_id_for(daemon, 'm-shot-1')}/approve", {"pair": False})
    wait_for(lambda: outcome(daemon, planner, "m-shot-1") == "delivered", 20, "the first message delivered")
    send(daemon, planner, builder, "Please run the test suite on the auth branch and tell me which tests fail.\nUse `make test`, not the IDE runner.", "m-shot-2")
    wait_for(lambda: all(daemon.agent_view(a.pane)["title"] for a in (planner, builder, reviewer, docs)), 10, "titles")
    shots = []
    for dark in (False, True):
        for viewport, name in ((B.PHONE, "390"), (B.DESKTOP, "1280")):
            p = Page(browser, daemon, viewport=viewport, dark=dark)
            try:
                p.card_for("auth branch").wait_for()
                p.agent(docs.pane).locator(".why").wait_for()
                p.page.wait_for_selector('#messages > li[data-message-id="m-shot-1"]')
                p.page.wait_for_selector("#audit > li")
                p.page.evaluate("document.fonts.ready")
                path = out / f"page-{name}-{'dark' if dark else 'light'}.png"
                p.page.screenshot(path=str(path), full_page=name == "1280")
                shots.append(path)
                assert not p.errors, p.errors
            finally:
                p.close()
    assert all(s.stat().st_size > 10_000 for s in shots)


@needs_browser
def test_login_through_connectd_token_shows_the_page(browser: Any, daemon: DaemonProcess) -> None:
    logged_out = B.new_context(browser)
    try:
        anon = logged_out.new_page()
        response = anon.goto(f"{daemon.base_url}/")
        assert response.status == 401 and f"token --data-dir {daemon.data_dir}" in anon.inner_text("body")
        assert anon.locator("#agents").count() == 0
    finally:
        logged_out.close()
    url = B.login_url(daemon.data_dir, daemon.port)  # what `connectd token` prints
    p = Page(browser, daemon, url=url)
    try:
        cookies = p.context.cookies()
        assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in cookies] == [(cookie_name(daemon.port), True, "Strict")]
        assert p.page.evaluate("document.cookie") == ""  # not readable by script
        p.page.wait_for_selector("#agents > li")
        reuse = p.context.new_page()
        assert reuse.goto(url).status == 401  # the code was used
        assert not p.errors, p.errors
    finally:
        p.close()


@needs_browser
def test_a_card_appears_shows_markup_as_text_and_approve_pair_types_into_b(page: Page, daemon: DaemonProcess) -> None:
    a, b = fleet(daemon, "a", "b")
    send(daemon, a, b, MARKUP, "m-pair")
    card = page.card_for("then report")
    card.wait_for()
    text = card.locator("[data-testid=card-text]")
    assert text.text_content() == MARKUP  # the text, exactly, as text
    assert card.locator("img, script, b, i").count() == 0
    assert page.page.evaluate("window.__pwned") is None
    assert b.address.split("@")[0] in card.inner_text()
    card.get_by_role("button", name="Approve pair").click()
    card.wait_for(state="detached")
    prompts = wait_for(b.prompts, 20, "B to receive the message")
    assert len(prompts) == 1 and prompts[0].split("\n", 1)[1] == MARKUP
    wait_for(lambda: outcome(daemon, a, "m-pair") == "delivered", 15, "delivered")
    row = page.page.locator('#messages > li[data-message-id="m-pair"]')
    row.locator('.outcome[data-kind="good"]').wait_for()
    assert MARKUP in row.locator(".msg-text").text_content()
    assert page.page.evaluate("window.__pwned") is None


@needs_browser
def test_a_title_shows_bidi_and_zero_width_characters_as_escapes(page: Page, daemon: DaemonProcess, tmux: TmuxServer) -> None:
    """Issue 21 item 5: a right-to-left override or a zero-width space in a pane title cannot reorder or hide it."""
    (a,) = fleet(daemon, "bidi")
    title = "run \u202etxt.exe\u202c and\u200bzw"
    tmux.tmux("select-pane", "-t", a.pane, "-T", title)
    wait_for(lambda: daemon.agent_view(a.pane)["title"] == title, 10, "the title")
    page.page.reload()  # the list drawn from the view that holds the title (the claim is how it is drawn)
    sub = page.page.locator(f'#agents > li[data-pane="{a.pane}"] .agent-title .sub')
    sub.wait_for()
    wait_for(lambda: "txt.exe" in (sub.text_content() or ""), 10, "the title on the page")
    assert sub.text_content() == "run \\u202etxt.exe\\u202c and\\u200bzw"


@needs_browser
def test_a_box_not_set_up_for_federation_shows_no_pairings_panel_and_no_error(page: Page, daemon: DaemonProcess) -> None:
    daemon.api("GET", "/api/pairing/status", expect=409)
    page.page.wait_for_function("document.getElementById('pairings').hidden === true")
    assert page.page.locator("#pair-requests > li").count() == 0 and not page.errors
    # (the panel with a real request, approval and a crafted name: tests/integration/test_page_pairing.py)


def test_decline_from_the_page(page: Page, daemon: DaemonProcess) -> None:
    a, b = fleet(daemon, "a", "b")
    send(daemon, a, b, "please decline me", "m-decline")
    card = page.card_for("please decline me")
    card.get_by_role("button", name="Decline").click()
    card.wait_for(state="detached")
    assert outcome(daemon, a, "m-decline") == "declined"
    time.sleep(0.5)
    assert b.prompts() == []


@needs_browser
def test_a_reply_card_says_in_words_what_each_answer_allows_quotes_the_question_and_places_the_panes(
    page: Page, daemon: DaemonProcess, tmux: TmuxServer
) -> None:
    """Issue 23 item 5: no tooltip a phone cannot show, no raw actor up front, the question shown,
    and every pane named with the tmux session:window to switch to."""
    a, b = fleet(daemon, "asker", "answerer")
    asked = send(daemon, a, b, "Which branch holds the login fix?", "m-question")
    daemon.api("POST", f"/api/cards/{card_id_for(daemon, 'm-question')}/approve", {"pair": False})
    wait_for(lambda: outcome(daemon, a, "m-question") == "delivered", 20, "the question delivered")
    err, sent = agent_call(daemon, b, "send_message", to=a.address, text="feat/login holds it", message_id="m-answer", in_reply_to=asked["ref"])
    assert not err, sent
    where = {x.pane: tmux.tmux("display-message", "-p", "-t", x.pane, "#{session_name}:#{window_index}").strip() for x in (a, b)}
    at_a, at_b = f"{a.pane} ({where[a.pane]})", f"{b.pane} ({where[b.pane]})"
    card = page.card_for("feat/login holds it")
    card.wait_for()
    assert card.locator("[data-testid=card-answers]").inner_text().endswith("Which branch holds the login fix?")
    assert card.locator("[data-testid=card-from]").inner_text().startswith(f"{at_b} · claude")
    assert card.locator("[data-testid=card-to]").inner_text().startswith(f"{at_a} · claude")
    assert card.get_by_role("button").all_inner_texts() == [
        "Approve once: this message only",
        f"Approve pair: every message from {at_b} to {at_a} until {at_a} ends",
        "Decline: nothing is typed; the sender is told it was declined",
    ]
    assert card.locator("[data-testid=card-hop]").inner_text().startswith("Reply 1 in a back-and-forth between agents (hop 2)")
    assert "agent:" not in card.inner_text()  # the actors are kept for the record, folded away
    assert page.agent(a.pane).locator(".agent-title strong").inner_text() == f"{at_a} · claude"
    card.get_by_role("button", name="Decline").click()
    card.wait_for(state="detached")


@needs_browser
def test_cards_come_newest_first_and_vanish_when_answered_elsewhere_or_cancelled_by_revocation(page: Page, daemon: DaemonProcess) -> None:
    a, b = fleet(daemon, "a", "b")
    send(daemon, a, b, "first of two", "m-first")
    page.card_for("first of two").wait_for()
    send(daemon, a, b, "second of two", "m-second")
    page.card_for("second of two").wait_for()
    texts = [t for t in page.cards().locator("[data-testid=card-text]").all_text_contents() if t in ("first of two", "second of two")]
    assert texts == ["second of two", "first of two"]  # newest first
    assert int(page.page.locator("#needs-count").inner_text()) >= 2
    # answered elsewhere (the CLI's route): gone without a reload
    daemon.api("POST", f"/api/cards/{card_id_for(daemon, 'm-second')}/approve", {"pair": False})
    page.card_for("second of two").wait_for(state="detached")
    # the sender's Connect turned off elsewhere: its open card is cancelled and vanishes
    daemon.api("POST", "/api/revoke", {"pane": a.pane})
    page.card_for("first of two").wait_for(state="detached")
    assert outcome_after_revoke(daemon, "m-first") == "cancelled"


def outcome_after_revoke(daemon: DaemonProcess, message_id: str) -> str:
    rows = daemon.api("GET", "/api/messages?limit=1000")
    return str(next(m["outcome"] for m in rows if m["message_id"] == message_id))


@needs_browser
def test_observe_then_off_from_the_fleet(page: Page, daemon: DaemonProcess) -> None:
    c, b = fleet(daemon, "c", "b")
    page.agent(c.pane).locator(".badge-icon [data-icon=messages-square]").wait_for()  # Collaborate's icon
    actor = daemon.agent_view(c.pane)["actor"]
    page.preset_button(c.pane, "observe").click()
    wait_for(lambda: daemon.agent_view(c.pane)["connect"] == "observe", 10, "observe")
    page.page.wait_for_selector(f'#agents > li[data-pane="{c.pane}"][data-connect="observe"] .badge-icon [data-icon=eye]')
    assert page.preset_button(c.pane, "observe").get_attribute("aria-pressed") == "true"
    err, text = agent_call(daemon, c, "send_message", to=b.address, text="hi", message_id="m-observe")
    assert err and "lacks the 'message' scope" in str(text)
    err, _ = agent_call(daemon, c, "whoami")
    assert not err  # reads still work
    page.preset_button(c.pane, "off").click()
    page.page.wait_for_selector(f'#agents > li[data-pane="{c.pane}"][data-connect="off"]')
    assert daemon.agent_view(c.pane)["connect"] == "off"
    err, text = agent_call(daemon, c, "whoami")
    assert err and "not connected" in str(text)
    rows = daemon.api("GET", "/api/audit?actor=owner:page:*&limit=1000")
    mine = [(r["action"], r["detail"]) for r in rows if r["target"] == actor]
    assert ("grant", "history,read") in mine and ("revoke", "") in mine  # the page's toggles, audited as owner:page


@needs_browser
def test_connect_is_disabled_with_its_reason_where_it_cannot_be_offered(page: Page, daemon: DaemonProcess, tmux: TmuxServer) -> None:
    launchers = {x["name"]: x for x in daemon.api("GET", "/api/launchers")}
    opaque, = fleet(daemon, "opaque", connect="off", launcher="mine")
    noresume, = fleet(daemon, "noresume", connect="off", launcher="noresume")
    typed = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir), str(daemon.tmp / "bin" / "claude")).strip()
    wait_for(lambda: any(x["pane"] == typed and x["harness"] == "claude" for x in daemon.api("GET", "/api/agents")), 10, "the typed agent")
    shell = next(x for x in daemon.api("GET", "/api/agents") if x["harness"] == "shell")
    cases = [
        (shell["pane"], "not an agent"),
        (opaque.pane, launchers["mine"]["reason"]),
        (noresume.pane, launchers["noresume"]["restart_refusal"]),
        (typed, "Not started by connectd"),
    ]
    for pane, reason in cases:
        assert reason, pane
        card = page.agent(pane)
        card.locator(".why", has_text=reason).wait_for()
        # a shell is one compact line with nothing to connect; an agent that cannot be offered Connect
        # shows the three presets disabled, with the reason
        assert card.locator(".seg button:disabled").count() == (0 if pane == shell["pane"] else 3), pane


@needs_browser
def test_restart_this_agent_to_connect_it(page: Page, daemon: DaemonProcess) -> None:
    session = str(uuid.uuid4())
    d, = fleet(daemon, "restart", connect="off", session=session)
    before = daemon.agent_view(d.pane)
    page.agent(d.pane).locator(".why", has_text="restarts it").wait_for()  # the page follows within its refresh
    page.preset_button(d.pane, "observe").click()
    dialog = page.page.locator("dialog#confirm")
    assert dialog.get_by_role("heading").inner_text() == "Restart this agent to connect it?"
    dialog.get_by_role("button", name="Cancel").click()
    time.sleep(0.3)
    assert daemon.agent_view(d.pane)["connect"] == "off"  # cancelled: nothing asked of the daemon
    page.preset_button(d.pane, "observe").click()
    dialog.get_by_role("button", name="Restart and connect").click()
    page.agent(d.pane).locator(".progress").wait_for()  # progress from the `restart` event topic
    wait_for(lambda: daemon.agent_view(d.pane)["connect"] == "observe", 45, "the relaunch, connected")
    page.page.wait_for_selector(f'#agents > li[data-pane="{d.pane}"][data-connect="observe"]', timeout=20_000)
    page.agent(d.pane).locator('.progress[data-step="closed"]').wait_for(timeout=20_000)
    after = daemon.agent_view(d.pane)
    assert after["address"] != before["address"] and after["actor"] == f"agent:claude:{session}"


@needs_browser
def test_activity_messages_per_pane_and_the_audit_log_with_filters_and_paging(page: Page, daemon: DaemonProcess) -> None:
    a, b = fleet(daemon, "a", "b")
    send(daemon, a, b, "for the activity feed", "m-activity")
    daemon.api("POST", f"/api/cards/{card_id_for(daemon, 'm-activity')}/decline", {})
    agent_calls(daemon, a, [("list_agents", {})] * 30)  # enough audit records for several pages
    p = page.page
    p.select_option("#msg-pane", b.pane)
    row = p.locator('#messages > li[data-message-id="m-activity"]')
    row.wait_for()
    assert row.locator(".dir").inner_text() == "received" and row.locator(".outcome").inner_text().lower() == "declined"
    p.select_option("#msg-pane", a.pane)
    p.locator('#messages > li[data-message-id="m-activity"] .dir', has_text="sent").wait_for()
    # the newest page holds the newest record
    newest_id = max(all_ids(daemon))
    wait_for(lambda: max(audit_ids(p), default=0) >= newest_id, 10, "the newest audit page")
    first_page = audit_ids(p)
    assert first_page == sorted(first_page, reverse=True) and len(first_page) == 25
    p.click("#audit-older")
    wait_for(lambda: audit_ids(p) and max(audit_ids(p)) < min(first_page), 10, "the older page")
    older = audit_ids(p)
    assert max(older) == max(r for r in all_ids(daemon) if r < min(first_page))  # no gap between pages
    p.click("#audit-newer")
    wait_for(lambda: min(audit_ids(p), default=0) > max(older), 10, "back to the newer page")
    # filters: actor, pane, outcome
    actor = daemon.agent_view(a.pane)["actor"]
    p.fill("#audit-actor", actor)
    p.fill("#audit-outcome", "allowed")
    p.click("#audit-filters button[type=submit]")
    wait_for(lambda: audit_rows(p) and all(r == (actor, "allowed") for r in audit_rows(p)), 10, "filtered rows")
    p.fill("#audit-actor", "")
    p.fill("#audit-outcome", "declined")
    p.select_option("#audit-pane", b.pane)
    p.select_option("#audit-time", "3600")
    p.click("#audit-filters button[type=submit]")
    wait_for(lambda: audit_rows(p) and {o for _, o in audit_rows(p)} == {"declined"}, 10, "declined for B")


def audit_ids(p: Any) -> list[int]:
    return [int(x) for x in p.eval_on_selector_all("#audit > li", "els => els.map(e => e.dataset.id)")]


def audit_rows(p: Any) -> list[tuple[str, str]]:
    return [tuple(x) for x in p.eval_on_selector_all("#audit > li", "els => els.map(e => [e.dataset.actor, e.dataset.outcome])")]


def all_ids(daemon: DaemonProcess) -> list[int]:
    ids: list[int] = []
    while True:
        rows = daemon.api("GET", f"/api/audit?limit=1000&after={ids[-1] if ids else 0}")
        ids += [r["id"] for r in rows]
        if len(rows) < 1000:
            return ids


@needs_browser
def test_phone_width_touch_targets_and_keyboard(browser: Any, daemon: DaemonProcess) -> None:
    a, b = fleet(daemon, "kbd-a", "kbd-b")
    send(daemon, a, b, "keyboard card", "m-kbd")
    p = Page(browser, daemon, viewport={"width": 360, "height": 740})
    try:
        p.card_for("keyboard card").wait_for()
        p.agent(b.pane).wait_for()
        assert p.page.evaluate("document.documentElement.scrollWidth") <= 360  # no sideways scrolling
        small = p.page.eval_on_selector_all(
            "button, select, input, .tabs a",
            "els => els.filter(e => e.offsetParent !== null && !e.closest('dialog'))"
            ".map(e => [e.textContent.trim() || e.id, e.getBoundingClientRect().height]).filter(([, h]) => h < 44)",
        )
        assert small == [], small
        reached: list[str] = []
        for _ in range(60):  # Tab through the page: the card's actions and the toggles are reachable
            p.page.keyboard.press("Tab")
            reached.append(p.page.evaluate("(document.activeElement.dataset.focus || document.activeElement.textContent || '').trim()"))
            if "preset-observe" in reached and "decline" in reached:
                break
        assert "once" in reached and "pair" in reached and "decline" in reached and "preset-observe" in reached, reached
        card = p.card_for("keyboard card")
        card.get_by_role("button", name="Decline").focus()
        p.page.keyboard.press("Enter")
        card.wait_for(state="detached")
        assert p.page.evaluate("document.activeElement.closest('#needs-you') !== null")  # focus stays in Needs you
        assert outcome(daemon, a, "m-kbd") == "declined"
    finally:
        p.close()


@needs_browser
def test_cross_site_posts_are_refused(browser: Any, page: Page, daemon: DaemonProcess) -> None:
    a, = fleet(daemon, "xsite")
    target = f"{daemon.base_url}/api/disconnect-all"
    # a page of another site (a loopback address the route answers: nothing leaves the machine)
    evil_origin = f"http://127.0.0.2:{daemon.port}"
    page.context.route(
        f"{evil_origin}/**",
        lambda route: route.fulfill(
            content_type="text/html",
            body=f"""<form id=f method=post action="{target}" enctype="text/plain"><input name='{{"x":"' value='"}}'></form>
                     <script>fetch("{target}", {{method: "POST", mode: "no-cors", credentials: "include", body: "{{}}"}})
                     .finally(() => document.getElementById("f").submit());</script>""",
        ),
    )
    evil = page.context.new_page()
    with evil.expect_response(target) as posted:
        evil.goto(f"{evil_origin}/")
    assert posted.value.status in (401, 403)
    evil.close()
    # the logged-in page itself, posting without its token (what a forged same-site request would do)
    refused = page.page.evaluate(
        """url => fetch(url, {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"})
                  .then(async r => [r.status, (await r.json()).error])""",
        target,
    )
    assert refused == [403, "csrf"]
    assert daemon.agent_view(a.pane)["connect"] == "collaborate"
    err, _ = agent_call(daemon, a, "whoami")
    assert not err


@needs_browser
def test_the_page_lists_logged_in_browsers_and_ends_one(page: Page, daemon: DaemonProcess) -> None:
    """Issue 11, item 1: the person sees every page session and ends one they do not recognise."""
    with httpx2.Client(base_url=daemon.base_url, timeout=10, headers={"User-Agent": "someone-elses-browser"}) as other:
        assert other.get("/login", params={"code": login_code(daemon)}).status_code == 303
        mine = page.page.locator("#page-sessions > li", has_text="this browser")
        page.page.reload()
        page.wait_live()
        mine.wait_for()
        theirs = page.page.locator("#page-sessions > li", has_text="someone-elses-browser")
        theirs.wait_for()
        session_id = theirs.get_attribute("data-session")
        theirs.get_by_role("button", name="End").click()
        page.page.locator("dialog#confirm").get_by_role("button", name="End session").click()
        theirs.wait_for(state="detached")
        assert other.get("/api/agents").status_code == 401  # logged out at once
        rows = daemon.api("GET", "/api/audit?actor=owner:page:*&limit=1000")
        ended = [r for r in rows if r["action"] == "page_session_end" and session_id in (r["detail"] or "")]
        assert ended and ended[-1]["actor"].startswith("owner:page:") and ended[-1]["actor"] != f"owner:page:{session_id}"
    assert page.page.evaluate("fetch('/api/agents').then(r => r.status)") == 200  # this page is still in


@needs_browser
def test_disconnect_all_can_log_out_every_browser_too(browser: Any, daemon: DaemonProcess) -> None:
    """Issue 11, item 1: disconnect-all offers to end the page sessions as well."""
    (agent,) = fleet(daemon, "all-sessions")
    first, second = Page(browser, daemon), Page(browser, daemon)
    try:
        second.agent(agent.pane).wait_for()
        second.page.click("#disconnect-all")
        dialog = second.page.locator("dialog#confirm")
        dialog.get_by_label("Also log out every browser (this one too)").check()
        dialog.get_by_role("button", name="Disconnect all").click()
        wait_for(lambda: daemon.api("GET", "/api/page-sessions") == [], 10, "every page session ended")
        for p in (first, second):
            assert p.page.evaluate("fetch('/api/agents').then(r => r.status)") == 401
    finally:
        first.close()
        second.close()


@needs_browser
def test_disconnect_all_asks_first_then_turns_every_agent_off(page: Page, daemon: DaemonProcess) -> None:
    a, b = fleet(daemon, "all-a", "all-b")
    page.agent(b.pane).wait_for()
    page.page.click("#disconnect-all")
    dialog = page.page.locator("dialog#confirm")
    assert "Disconnect all" in dialog.get_by_role("heading").inner_text()
    dialog.get_by_role("button", name="Cancel").click()
    time.sleep(0.3)
    assert daemon.agent_view(a.pane)["connect"] == "collaborate"
    page.page.click("#disconnect-all")
    dialog.get_by_role("button", name="Disconnect all").click()
    wait_for(lambda: all(x["connect"] == "off" for x in daemon.api("GET", "/api/agents")), 10, "every agent off")
    page.page.wait_for_selector(f'#agents > li[data-pane="{a.pane}"][data-connect="off"]')
    assert page.page.locator('#agents > li:not([data-connect="off"])').count() == 0
    for agent in (a, b):
        err, text = agent_call(daemon, agent, "whoami")
        assert err and "not connected" in str(text)


@needs_browser
def test_off_and_disconnect_all_show_what_another_box_has_not_yet_confirmed(page: Page, daemon: DaemonProcess) -> None:
    """A revocation's answer names the messages another box has not yet confirmed cancelled
    (``cancels_unconfirmed``, as ``/api/revoke``'s): the page says it after Off and after disconnect-all.
    (This daemon does not federate, so the line is added to its real answer on the way.)"""
    a, b = fleet(daemon, "unc-a", "unc-b")
    page.agent(b.pane).wait_for()
    line = "1 message: box devbox has not yet confirmed it is cancelled"

    def answer(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        assert body["cancels_unconfirmed"] == []  # the daemon's own answer carries the field
        route.fulfill(response=response, json={**body, "cancels_unconfirmed": [line]})

    page.page.route("**/api/panes/*/connect", answer)
    page.page.route("**/api/disconnect-all", answer)
    toast = page.page.locator("#toast")
    page.preset_button(a.pane, "off").click()
    toast.filter(has_text=f"{a.pane}: Connect is off. {line}.").wait_for(timeout=WAIT_MS)
    page.page.click("#disconnect-all")
    page.page.locator("dialog#confirm").get_by_role("button", name="Disconnect all").click()
    toast.filter(has_text=f"Disconnected 1 agent. {line}.").wait_for(timeout=WAIT_MS)


@needs_browser
def test_the_messages_panel_shows_a_cancelling_message_and_that_the_other_box_has_not_confirmed(
    page: Page, daemon: DaemonProcess
) -> None:
    """A message to another box whose sender was revoked is ``cancelling`` until that box confirms: the
    Messages panel shows it so (a waiting outcome) with the sentence. (This daemon does not federate: the
    row, as ``/api/messages`` gives it, is added to its real answer on the way.)"""
    sentence = "box devbox has not yet confirmed it is cancelled"
    row = {
        "message_id": "x-cancel", "ref": None, "outcome": "cancelling", "reason": sentence, "to": "%4@51d7a9c03e6f2b18",
        "from": "agent:claude:s-1", "hop": 1, "conversation": "c-1", "in_reply_to": None, "created_at": time.time(),
        "final_at": None, "waits_for": f"cancelling: {sentence}", "text": "hello from box A", "recipient_pane": None,
        "recipient_principal": None, "sender": "p-1", "state": "cancelling", "card": None, "from_box": None,
        "to_box": "devbox",
    }

    def answer(route: Any) -> None:
        response = route.fetch()
        route.fulfill(response=response, json=[row, *response.json()])

    page.page.route("**/api/messages?*", answer)
    page.page.reload()
    shown = page.page.locator('#messages > li[data-message-id="x-cancel"]')
    shown.wait_for(timeout=WAIT_MS)
    assert shown.locator(".outcome").inner_text().lower() == "cancelling"
    assert shown.locator(".outcome").get_attribute("data-kind") == "wait"
    assert sentence in shown.inner_text() and "on box devbox" in shown.inner_text()


@needs_browser
def test_the_page_survives_a_daemon_restart(page: Page, daemon: DaemonProcess) -> None:
    page.page.wait_for_selector("#agents > li")
    daemon.stop()
    page.page.wait_for_selector("#live[data-state=reconnecting]")
    daemon.start()
    page.wait_live(timeout=30_000)  # the same session cookie works with the new process
    a, b = fleet(daemon, "after-a", "after-b")
    send(daemon, a, b, "sent after the restart", "m-after")
    card = page.card_for("sent after the restart")
    card.wait_for()  # the reconnected event stream brought it, no reload
    card.get_by_role("button", name="Approve once").click()
    card.wait_for(state="detached")
    wait_for(lambda: any("sent after the restart" in x for x in b.prompts()), 20, "delivery")


@needs_browser
def test_a_draft_connect_left_is_a_needs_you_note_counted_in_the_top_bar(page: Page, daemon: DaemonProcess) -> None:
    """The page renders what ``GET /api/needs`` lists (the core opens and closes the items; see
    tests/unit/test_arming.py); here the daemon's answer is stood in for, the rest is the real page."""
    assert page.page.evaluate("fetch('/api/needs').then((r) => r.json())") == []
    item = {
        "kind": "left_draft",
        "id": "draft:%7",
        "pane": "%7",
        "summary": "connect left an unsent message in %7's composer",
        "why": "typing was not confirmed; a draft is in the composer",
        "message_id": "m-<b>draft</b>",
        "ref": "r1",
        "sender": "agent:claude:pane:%1:4000",
        "at": time.time(),
    }
    # the top bar counts open cards and acts too: other tests on this daemon may leave some open (which
    # ones depends on the order and on xdist's split), so here there are none and the count is the item
    for other in ("cards", "acts"):
        page.page.route(f"**/api/{other}", lambda route: route.fulfill(json=[]))
    page.page.route("**/api/needs", lambda route: route.fulfill(json=[item]))
    page.page.reload()
    page.wait_live()
    note = page.page.locator("#needs-notes > li[data-testid=left-draft]")
    note.wait_for()
    assert note.locator(".summary").text_content() == "connect left an unsent message in %7's composer"
    assert "m-<b>draft</b>" in note.inner_text() and note.locator("b").count() == 0  # text, never markup
    assert page.page.locator("#needs-count").text_content() == "1"
    assert page.page.locator("#cards-empty").is_hidden()
    page.page.route("**/api/needs", lambda route: route.fulfill(json=[]))
    page.page.reload()
    page.wait_live()
    page.page.locator("#needs-notes > li").first.wait_for(state="detached")
    assert page.page.locator("#needs-count").text_content() == "0"


@needs_browser
def test_control_s_act_card_names_its_tier_and_control_has_its_icon_and_a_stop_switch(page: Page, daemon: DaemonProcess) -> None:
    (ctl,) = fleet(daemon, "ctl", connect="off", control=True)
    (pure,) = fleet(daemon, "pure", connect="off")
    err, act = agent_call(daemon, ctl, "close_pane", to=pure.address)
    assert not err, act
    card = page.page.locator("#acts > li", has=page.page.get_by_text(pure.pane, exact=False))
    card.wait_for()
    assert "Tier 3" in card.inner_text() and "close_pane" in card.inner_text()
    assert page.page.locator("#needs-count").text_content() != "0"
    control_card = page.agent(ctl.pane)
    control_card.locator('[data-icon="crown"]').first.wait_for()
    assert page.agent(pure.pane).locator('[data-icon="crown"]').count() == 0
    card.get_by_role("button", name="Approve").click()
    card.wait_for(state="detached")
    wait_for(lambda: pure.pane not in {a["pane"] for a in daemon.api("GET", "/api/agents")}, 15, "the pane closed")
    control_card.get_by_role("button", name="Stop control").click()
    wait_for(lambda: "act" not in daemon.agent_view(ctl.pane)["scopes"], 15, "control stopped")
    assert not page.errors, page.errors


@needs_browser
def test_the_person_starts_control_from_the_page_and_then_the_action_is_hidden(page: Page, daemon: DaemonProcess) -> None:
    """Start control: a structured, connectable launcher and a directory; a new pane runs the stand-in as
    control (crown icon, its stop switch) and the action goes, as at most one control runs."""
    before = {a["pane"] for a in daemon.api("GET", "/api/agents")}
    start = page.page.get_by_role("button", name="Start control", exact=True).first
    start.wait_for()
    start.click()
    dialog = page.page.locator("dialog#start-control-dialog")
    launchers = dialog.get_by_label("Launcher")
    offered = launchers.locator("option").evaluate_all("els => els.map(e => e.value)")
    assert "mine" not in offered and "claude" in offered, offered  # an opaque launcher is not offered
    launchers.select_option("claude")
    dialog.get_by_label("Working directory").fill(str(daemon.workdir))
    dialog.get_by_label("Working directory").press("Enter")  # keyboard: Enter submits
    dialog.wait_for(state="hidden")
    ctl = wait_for(lambda: next((a for a in daemon.api("GET", "/api/agents") if a["pane"] not in before and a["control"]), None), 20, "the control pane")
    try:
        assert ctl["launcher"] == "claude" and {"act", "message", "history"} <= set(ctl["scopes"]), ctl  # Collaborate + act
        page.agent(ctl["pane"]).locator('.badge-icon [data-icon="crown"]').wait_for()
        page.agent(ctl["pane"]).get_by_role("button", name="Stop control").wait_for()
        page.page.locator("#start-control").wait_for(state="hidden")  # at most one control
        rows = daemon.api("GET", "/api/audit?actor=owner:page:*&limit=1000")
        assert any(r["action"] == "launch" and r["target"] == ctl["pane"] and "role=control" in r["detail"] for r in rows)
    finally:
        daemon.api("POST", "/api/control/stop", {})
    page.page.locator("#start-control").wait_for()  # control stopped: the action is back
    assert not page.errors, page.errors


@needs_browser
def test_starting_control_with_a_bad_directory_shows_the_api_s_reason_and_launches_nothing(page: Page, daemon: DaemonProcess) -> None:
    count = len(daemon.api("GET", "/api/agents"))
    page.page.locator("#start-control").click()
    dialog = page.page.locator("dialog#start-control-dialog")
    error = dialog.get_by_role("alert")
    for cwd in ("relative/dir", str(daemon.workdir / "missing")):
        dialog.get_by_label("Working directory").fill(cwd)
        dialog.get_by_role("button", name="Start control").click()
        error.filter(has_text=f"cwd must be an existing absolute directory, not {cwd!r}").wait_for()
        assert dialog.is_visible()  # the dialog stays open with the reason
    dialog.get_by_role("button", name="Cancel").click()
    dialog.wait_for(state="hidden")
    time.sleep(0.5)
    assert len(daemon.api("GET", "/api/agents")) == count
    assert not any(a["control"] for a in daemon.api("GET", "/api/agents"))
    assert not page.errors, page.errors


def test_an_agent_on_a_release_outside_the_matrix_is_marked_on_the_page(page: Page, daemon: DaemonProcess) -> None:
    """Its release shows with the mark "unverified release: messages wait until its screens are read";
    a verified release shows as such, unmarked."""
    (verified,) = fleet(daemon, "ver")
    (unverified,) = fleet(daemon, "unv", env={"DEMO_AGENT_RELEASE": "2.1.999"})
    # Until the release is read from its program the mark says "unknown release"; then it says this.
    words = "unverified release: messages wait until its screens are read"
    mark = page.agent(unverified.pane).locator("[data-testid=release-note]", has_text=words)
    mark.wait_for()
    assert mark.inner_text().strip() == words
    assert mark.get_attribute("role") == "status"
    page.facts(unverified.pane).locator("dd", has_text="2.1.999 (unverified)").wait_for()
    page.facts(verified.pane).locator("dd", has_text="2.1.332 (verified)").wait_for()
    assert page.agent(verified.pane).locator("[data-testid=release-note]").count() == 0


def test_a_hand_started_agent_is_connected_in_place_and_the_page_says_its_tools_come_at_relaunch(page: Page, daemon: DaemonProcess, tmux: TmuxServer) -> None:
    session = str(uuid.uuid4())
    codex_home = daemon.tmp / "codex-home"  # a rollout binds only from its holder's $CODEX_HOME/sessions
    rollout = codex_home / "sessions" / f"rollout-2026-12-03T17-00-00-{session}.jsonl"
    rollout.parent.mkdir(parents=True, exist_ok=True)
    rollout.write_text("")
    holder = f"import time; f = open({str(rollout)!r}, 'a'); print('codex stand-in'); time.sleep(600)"
    pane = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir)).strip()
    tmux.tmux("send-keys", "-t", pane, "-l", f'CODEX_HOME={codex_home} bash -c "exec -a codex {sys.executable} -c \\"{holder}\\""')
    tmux.tmux("send-keys", "-t", pane, "Enter")
    wait_for(lambda: (daemon.agent_view(pane).get("session") or {}).get("session_id") == session, 20, "the rollout binding")
    try:
        page.agent(pane).locator(".seg button:enabled").first.wait_for()
    except Exception:
        raise AssertionError(page.agent(pane).inner_text() + repr(daemon.agent_view(pane))) from None
    page.preset_button(pane, "collaborate").click()
    note = ("connected: receives now; connect did not start it, so its tools arrive once it runs under connect: "
            f"quit it and run `connectd launch --here codex --session {session}` in its pane")
    page.facts(pane).locator("dd", has_text=note).wait_for()
    view = daemon.agent_view(pane)
    assert view["connect"] == "collaborate" and view["reachable"] and view["note"] == note
    tmux.tmux("kill-pane", "-t", pane)


@needs_browser
def test_the_login_screen_shows_the_exact_command_for_this_data_directory(browser: Any, daemon: DaemonProcess) -> None:
    """Issue 23 item 8: the login screen showed backticks literally and a command without --data-dir."""
    logged_out = B.new_context(browser)
    try:
        anon = logged_out.new_page()
        anon.goto(f"{daemon.base_url}/")
        body = anon.inner_text("body")
        command = anon.inner_text("pre.cmd").strip()
        assert "`" not in body, body
        assert command.endswith(f"token --data-dir {daemon.data_dir}"), command
    finally:
        logged_out.close()


@needs_browser
def test_the_fleet_actions_stay_together_and_other_panes_are_one_line(browser: Any, daemon: DaemonProcess) -> None:
    """Issue 23 item 8: "Start control" floated away from "Disconnect all"; a shell got a full card."""
    a, = fleet(daemon, "tb-a")
    shell = next(x for x in daemon.api("GET", "/api/agents") if x["harness"] == "shell")
    for viewport in (B.DESKTOP, B.PHONE):
        p = Page(browser, daemon, viewport=viewport)
        try:
            p.agent(a.pane).wait_for()
            assert p.page.locator(".fleet-actions #start-control, .fleet-actions #disconnect-all").count() == 2
            boxes = [p.page.locator(f"#{i}").bounding_box() for i in ("start-control", "disconnect-all")]
            if all(boxes):  # (Start control is hidden while a control agent runs)
                left, right = sorted(boxes, key=lambda b: b["x"])  # type: ignore[index]
                assert 0 <= right["x"] - (left["x"] + left["width"]) <= 24 and abs(left["y"] - right["y"]) < 4, boxes
            other = p.agent(shell["pane"]).bounding_box()
            agent = p.agent(a.pane).bounding_box()
            assert other and agent and other["height"] <= 64 and other["height"] < agent["height"] / 2, (other, agent)
            assert not p.errors, p.errors
        finally:
            p.close()


@needs_browser
def test_at_phone_width_two_agents_fit_on_the_first_screen(browser: Any, daemon: DaemonProcess) -> None:
    """Issue 23 item 8: one agent's card filled a phone screen; its facts now fold under Details there."""
    a, b = fleet(daemon, "ph-a", "ph-b")
    p = Page(browser, daemon, viewport=B.PHONE)
    try:
        p.agent(b.pane).wait_for()
        top = p.agent(a.pane).bounding_box()
        assert top is not None
        assert top["height"] <= B.PHONE["height"] / 2, top
        assert p.agent(a.pane).locator("details.facts-fold").get_attribute("open") is None
        assert not p.errors, p.errors
    finally:
        p.close()


def test_an_agent_shows_what_its_messages_wait_for_and_the_audit_header_counts(page: Page, daemon: DaemonProcess) -> None:
    """Issue 22 item 4 (the page's half) and issue 23 item 8 ("Records 3-27" gave ids, not a count).

    The page shows B before the message exists, so the line can only come from the refresh the
    message's card event causes (issue 24: the page reloaded the agents on pane and grant events
    only, and the line waited for some unrelated pane event).
    """
    a, b = fleet(daemon, "wt-a", "wt-b")
    page.agent(b.pane).wait_for()
    line = page.agent(b.pane).locator("[data-testid=waiting]")
    assert line.count() == 0
    send(daemon, a, b, "waits on its card", "m-wait-1")
    card = card_id_for(daemon, "m-wait-1")
    line.wait_for()
    assert line.inner_text().strip() == f"1 message waits: until the person answers card {card}"
    page.page.wait_for_selector("#audit > li")
    # the list and its header in one read: a live refresh between two reads would make them differ
    shown, status = page.page.evaluate("() => [document.querySelectorAll('#audit > li').length, document.getElementById('audit-status').textContent]")
    assert status.startswith(f"{shown} record"), (shown, status)
