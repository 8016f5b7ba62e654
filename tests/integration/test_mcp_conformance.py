"""The official MCP conformance suite against connect's ``/mcp``, through a loopback proxy that adds an
agent's bearer token (the suite sends none), one scenario at a time, each as a fresh agent (the suite
never closes its sessions, and a principal holds at most 8).

Claim: every server scenario of the pinned suite that applies to connect passes, and every scenario
the suite has is either held here or listed with the reason it does not apply, so a suite or SDK
upgrade that adds or breaks a scenario fails this test instead of passing unseen.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import mcp_conformance as suite
from tests.support.bearer_proxy import bearer_proxy
from tests.support.daemon import DaemonProcess
from tests.support.fixtures import running_daemon, tmux_session


@pytest.fixture(scope="module")
def installed() -> Path:
    return suite.install()  # installs once when missing (make harnesses does it before the tests)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with (
        tmux_session("connect-conformance") as tmux,
        running_daemon(tmp_path_factory.mktemp("conformance"), tmux) as daemon,
    ):
        yield daemon


def test_every_scenario_of_the_suite_is_held_or_said_not_to_apply(installed: Path) -> None:
    listed = set(suite.server_scenarios())
    assert listed, "the suite listed no server scenarios"
    assert not set(suite.APPLIES) & set(suite.DOES_NOT_APPLY)
    assert listed == set(suite.APPLIES) | set(suite.DOES_NOT_APPLY), (
        f"new in the suite: {sorted(listed - set(suite.APPLIES) - set(suite.DOES_NOT_APPLY))}; "
        f"gone from it: {sorted(set(suite.APPLIES) | set(suite.DOES_NOT_APPLY) - listed)}"
    )


@pytest.mark.parametrize("scenario", sorted(suite.APPLIES))
def test_scenario_passes_against_mcp(installed: Path, served: DaemonProcess, scenario: str) -> None:
    agent = served.launch(f"conf-{scenario}", connect="observe")
    assert agent.token, "the stand-in agent revealed no token"
    with bearer_proxy(served.base_url, agent.token) as url:
        run = subprocess.run(suite.command("server", "--url", url, "--scenario", scenario),
                             env=suite.env(), capture_output=True, text=True, timeout=180)
    output = re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)
    totals = re.search(r"Passed: (\d+)/(\d+), (\d+) failed", output)
    assert run.returncode == 0 and totals is not None, f"{scenario} ({suite.APPLIES[scenario]}):\n{output[-4000:]}"
    passed, total, failed = (int(n) for n in totals.groups())
    assert total >= 1 and passed == total and failed == 0, f"{scenario}:\n{output[-4000:]}"
