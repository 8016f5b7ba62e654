"""The official MCP conformance suite (``@modelcontextprotocol/conformance``), pinned, with the Node it needs.

The suite needs Node 22 or newer; the machine's Node may be older, so the npm package ``node`` (a Node
build shipped inside a registry package) is installed beside the suite, into ``.cache/conformance``,
and the suite runs with that Node first on ``PATH``. ``python -m tests.support.mcp_conformance install``
(run by ``make harnesses``, so the download is never inside a test's deadline) installs both once.

Which server scenarios apply to connect, and why the others do not, is :data:`APPLIES` and
:data:`DOES_NOT_APPLY`; ``tests/integration/test_mcp_conformance.py`` runs every scenario of the first
against ``/mcp`` and checks that the two lists cover every scenario the pinned suite has.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: The pins (checked with ``npm view @modelcontextprotocol/conformance dist-tags`` and ``npm view node@22``).
SUITE = ("@modelcontextprotocol/conformance", "0.1.16")
NODE = ("node", "22.23.3")

DIR = REPO / ".cache" / "conformance" / f"{SUITE[1]}-node{NODE[1]}"
BIN = DIR / "node_modules" / ".bin"

#: Server scenarios connect is held to, and what each checks there.
APPLIES: dict[str, str] = {
    "server-initialize": "the handshake era's initialize answer",
    "ping": "ping answered",
    "tools-list": "connect's tools listed with valid schemas",
    "tools-call-error": "a call of a tool connect does not offer is an isError result, not a protocol error",
    "server-sse-multiple-streams": "concurrent POST streams on one session",
    "dns-rebinding-protection": "a foreign Host or Origin refused, the daemon's own accepted",
}

#: Server scenarios that test features connect does not offer (their fixture tools, resources and
#: prompts are the suite's reference server's, not an MCP requirement), with the reason.
DOES_NOT_APPLY: dict[str, str] = {
    "logging-set-level": "connect declares no logging capability, so logging/setLevel is method-not-found",
    "completion-complete": "connect declares no completions capability (no prompts or resource templates)",
    "tools-call-simple-text": "calls the suite's fixture tool test_simple_text",
    "tools-call-image": "calls the suite's fixture tool test_image_content",
    "tools-call-audio": "calls the suite's fixture tool test_audio_content",
    "tools-call-embedded-resource": "calls the suite's fixture tool test_embedded_resource",
    "tools-call-mixed-content": "calls the suite's fixture tool test_multiple_content_types",
    "tools-call-with-logging": "calls the suite's fixture tool test_tool_with_logging",
    "tools-call-with-progress": "calls the suite's fixture tool test_tool_with_progress",
    "tools-call-sampling": "calls the suite's fixture tool test_sampling (connect never samples the agent's model)",
    "tools-call-elicitation": "calls the suite's fixture tool test_elicitation (connect never elicits)",
    "json-schema-2020-12": "looks for the suite's fixture tool json_schema_2020_12_tool",
    "elicitation-sep1034-defaults": "calls the suite's elicitation fixture tool",
    "elicitation-sep1330-enums": "calls the suite's elicitation fixture tool",
    "server-sse-polling": "calls the suite's fixture tool test_reconnection, which closes its stream mid-call",
    "resources-list": "connect offers no resources",
    "resources-read-text": "connect offers no resources",
    "resources-read-binary": "connect offers no resources",
    "resources-templates-read": "connect offers no resources",
    "resources-subscribe": "connect offers no resources",
    "resources-unsubscribe": "connect offers no resources",
    "prompts-list": "connect offers no prompts",
    "prompts-get-simple": "connect offers no prompts",
    "prompts-get-with-args": "connect offers no prompts",
    "prompts-get-embedded-resource": "connect offers no prompts",
    "prompts-get-with-image": "connect offers no prompts",
}


def env() -> dict[str, str]:
    """The environment the suite runs in: the pinned Node first on ``PATH``."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def command(*args: str) -> list[str]:
    return [str(BIN / "conformance"), *args]


def install() -> Path:
    """Install the pinned suite and Node unless present; return the suite's program."""
    program = BIN / "conformance"
    if program.exists() and (BIN / "node").exists():
        return program
    partial = DIR.with_name(DIR.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    subprocess.run(["npm", "install", "--prefix", str(partial), "--no-audit", "--no-fund", "--no-save",
                    f"{NODE[0]}@{NODE[1]}", f"{SUITE[0]}@{SUITE[1]}"],
                   check=True, capture_output=True, text=True, timeout=600)
    shutil.rmtree(DIR, ignore_errors=True)
    partial.rename(DIR)
    if not program.exists():
        raise RuntimeError(f"npm installed {SUITE[0]}@{SUITE[1]} but {program} is missing")
    return program


def server_scenarios() -> list[str]:
    """Every server scenario the pinned suite lists (``conformance list``)."""
    listed = subprocess.run(command("list"), env=env(), capture_output=True, text=True, timeout=120, check=True)
    scenarios: list[str] = []
    section = False
    for line in listed.stdout.splitlines():
        if line.startswith("Server scenarios"):
            section = True
        elif line and not line.startswith(" "):
            section = False
        elif section and line.strip().startswith("- "):
            scenarios.append(line.strip()[2:].split(" ")[0])
    return scenarios


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["install"]:
        print("usage: python -m tests.support.mcp_conformance install", file=sys.stderr)
        return 2
    print(f"{SUITE[0]} {SUITE[1]} (node {NODE[1]}): {install()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
