"""What ``make test`` needs from the system (tmux; chromium for the owner page's browser tests),
installed when it can be and otherwise named with the command to run: never a silent skip.

As root with apt-get (a container, CI): ``apt-get update`` and ``apt-get install -y`` the missing
packages, as ``.ci/run`` does. Otherwise: print the command and exit 1, so ``make test`` stops before
any test runs. ``CONNECT_CHROMIUM`` names another chromium binary (as in ``tests/support/browser.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping

CHROMIUM_DEFAULT = "/usr/bin/chromium"


def missing(
    which: Callable[[str], str | None] = shutil.which,
    env: Mapping[str, str] = os.environ,
    is_executable: Callable[[str], bool] = lambda p: os.path.isfile(p) and os.access(p, os.X_OK),
) -> list[str]:
    """The Debian packages the tests need and this machine lacks."""
    need = []
    if which("tmux") is None:
        need.append("tmux")
    if not is_executable(env.get("CONNECT_CHROMIUM") or CHROMIUM_DEFAULT):
        need.append("chromium")
    return need


def plan(need: list[str], *, root: bool, apt: bool) -> tuple[list[list[str]], str]:
    """(the commands to run, or [] with the message that stops ``make test``)."""
    if not need:
        return [], ""
    if root and apt:
        return [["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *need]], ""
    return [], (
        f"make test needs {', '.join(need)} (the browser tests drive /usr/bin/chromium; every test needs tmux).\n"
        f"Install: sudo apt-get install -y {' '.join(need)}\n"
        "(or run make test as root in a container, which installs them), then run make test again."
    )


def main() -> int:
    need = missing()
    commands, stop = plan(need, root=os.geteuid() == 0, apt=shutil.which("apt-get") is not None)
    if stop:
        print(stop, file=sys.stderr)
        return 1
    for command in commands:
        print("+ " + " ".join(command), flush=True)
        subprocess.run(command, check=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    left = missing()
    if left:
        print(f"still missing after apt-get: {', '.join(left)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
