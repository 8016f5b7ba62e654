"""Debian's chromium driven by Playwright for Python, for the owner page's browser tests.

Never ``playwright install``: the browser is the system's ``/usr/bin/chromium`` (``.ci/run`` installs
it through apt, as does ``make test`` when run as root). :func:`missing` says what the browser tests
lack here, with the command to run, or None; the tests fail on it, never skip.

Each :func:`launch` starts a fresh headless browser with its own temporary profile (Playwright gives
every ``launch`` a new user-data-dir and deletes it at close), with networking limited to what the
page asks for: no background networking, component updates, sync or QUIC.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("CONNECT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-default-browser-check",
    "--metrics-recording-only",
]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def missing() -> str | None:
    """What the browser tests need and this machine lacks, with the command that installs it (None:
    nothing). A missing browser fails the browser tests, never skips them: ``make test`` installs
    chromium when it runs as root and otherwise stops with this command."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright (Python) is not installed: run `pip install -e '.[dev]'` (never `playwright install`)"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"{CHROMIUM} is missing: run `sudo apt-get install -y chromium` (or set CONNECT_CHROMIUM to a chromium binary)"
    return None


@contextmanager
def launch() -> Iterator[Any]:
    """A headless chromium (Playwright ``Browser``), closed at the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_context(browser: Any, *, viewport: dict[str, int] | None = None, dark: bool = False) -> Any:
    return browser.new_context(
        viewport=viewport or PHONE,
        color_scheme="dark" if dark else "light",
        reduced_motion="reduce",
        locale="en-GB",
        timezone_id="UTC",
        service_workers="block",
    )


def login_url(data_dir: Path, port: int) -> str:
    """The URL ``connectd token`` prints (a one-time login code), from the real CLI."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env["PYTHONPATH"] = str(root / "src")
    proc = subprocess.run(
        [sys.executable, "-m", "connectd.cli", "token", "--data-dir", str(data_dir), "--port", str(port)],
        capture_output=True, text=True, env=env, timeout=30, check=True,
    )
    match = re.search(r"http://127\.0\.0\.1:\d+/login\?code=[A-Za-z0-9_-]+", proc.stdout)
    assert match, f"connectd token printed no login URL: {proc.stdout!r} {proc.stderr!r}"
    return match.group(0)


def chromium_version() -> str:
    path = shutil.which(CHROMIUM) or CHROMIUM
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()
