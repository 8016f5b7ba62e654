"""What a message waits for (issue 22 item 4) and the lists a newcomer reads (issue 23 item 8), each as
the output of the real ``connectd`` command against a real daemon on a private tmux server: the
``waits_for`` of ``messages``, the ``waiting`` lines of ``agents``, ``cards --all`` with each answered
card's state and no countdown, a control agent labelled ``control``, counts in the singular for one,
the consent record naming both panes with their ``session:window``, and ``history search`` outside
tmux placing a session in the running daemon's pane."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.fixtures.history.transcripts import Claude, make_repo
from tests.integration.test_daemon_e2e import agents, run, send
from tests.integration.test_releases import launch
from tests.support.daemon import ROOT, DaemonProcess, wait_for
from tests.support.tmux_server import TmuxServer


def connectd(daemon: DaemonProcess, *args: str, env: dict[str, str] | None = None) -> str:
    """``connectd ARGS --data-dir <daemon's>`` outside tmux; it must succeed; its stdout."""
    base = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE", "CONNECT_DATA_DIR")}
    out = subprocess.run(
        [sys.executable, "-m", "connectd.cli", *args, "--data-dir", str(daemon.data_dir)],
        capture_output=True, text=True, env={**base, "PYTHONPATH": str(ROOT / "src"), **(env or {})}, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def window_of(daemon: DaemonProcess, pane: str) -> str:
    return daemon.tmux.tmux("display-message", "-p", "-t", pane, "#{session_name}:#{window_index}").strip()


def test_messages_and_agents_say_what_each_message_waits_for(daemon: DaemonProcess) -> None:
    """Issue 22 item 4: messages to an agent whose release is unknown waited with nothing saying why."""
    (a,) = agents(daemon, "a")
    n = launch(daemon, "n", "")  # no release in its banner: unknown
    assert not run(send, daemon, a, n.address, "first", "m-first")[0]
    card = daemon.wait_card()
    listed = connectd(daemon, "messages")
    assert f"m-first: queued; waits until the person answers card {card['id']}" in listed, listed
    assert f"{n.address}: 1 message waits: until the person answers card {card['id']}" in connectd(daemon, "agents")
    connectd(daemon, "approve", card["id"], "--pair")
    assert not run(send, daemon, a, n.address, "second", "m-second")[0]  # the pair is approved: no card

    expected = [
        {"message": "m-first", "waits_for": "until its release is known"},
        {"message": "m-second", "waits_for": "until its release is known"},
    ]
    wait_for(lambda: daemon.agent_view(n.pane)["waiting"] == expected, 10, "both waiting on the release")
    shown = connectd(daemon, "agents").splitlines()
    assert f"{n.address}: 2 messages wait: until its release is known" in shown, shown
    assert not any(line.startswith(f"{daemon.agent_view(a.pane)['address']}: ") for line in shown)  # nothing waits for a
    rows = {m["message_id"]: m for m in json.loads(connectd(daemon, "messages", "--json"))["items"]}
    assert rows["m-first"]["waits_for"] == rows["m-second"]["waits_for"] == "until its release is known"
    assert sum("; waits until its release is known" in line for line in connectd(daemon, "messages").splitlines()) == 2

    # a final message waits for nothing
    assert not run(send, daemon, n, a.address, "back", "m-back")[0]
    back = wait_for(lambda: next((c for c in daemon.cards() if c["message_id"] == "m-back"), None), 10, "m-back's card")
    connectd(daemon, "decline", back["id"])
    rows = {m["message_id"]: m for m in json.loads(connectd(daemon, "messages", "--json"))["items"]}
    assert rows["m-back"]["outcome"] == "declined" and rows["m-back"]["waits_for"] == ""
    line = next(x for x in connectd(daemon, "messages").splitlines() if " m-back: " in x)
    assert "waits" not in line


def test_cards_all_shows_each_answered_card_s_state_without_a_countdown_and_consent_names_both_panes(
    daemon: DaemonProcess,
) -> None:
    """Issue 23 item 8: `cards --all` showed answered cards with no state and a running countdown; the
    consent audit row named only the sender."""
    a, b = agents(daemon, "a", "b")
    ids = {}
    for message_id in ("m-once", "m-no", "m-open"):
        assert not run(send, daemon, a, b.address, f"text of {message_id}", message_id)[0]
        ids[message_id] = wait_for(
            lambda m=message_id: next((c["id"] for c in daemon.cards() if c["message_id"] == m), None), 10, message_id
        )
    connectd(daemon, "approve", ids["m-once"])
    connectd(daemon, "decline", ids["m-no"])
    text = connectd(daemon, "cards", "--all")
    starts = sorted((text.index(f"{card_id}  from "), card_id) for card_id in ids.values())
    ends = [start for start, _ in starts[1:]] + [len(text)]
    blocks = {card_id: text[start:end] for (start, card_id), end in zip(starts, ends, strict=True)}
    assert "approved once by owner" in blocks[ids["m-once"]] and "left to answer" not in blocks[ids["m-once"]]
    assert "declined by owner" in blocks[ids["m-no"]] and "left to answer" not in blocks[ids["m-no"]]
    assert " approve " not in blocks[ids["m-once"]] + blocks[ids["m-no"]]
    assert "s left to answer:" in blocks[ids["m-open"]] and f" approve {ids['m-open']} --data-dir" in blocks[ids["m-open"]]
    states = {c["id"]: c["state_words"] for c in json.loads(connectd(daemon, "cards", "--all", "--json"))}
    assert states == {ids["m-once"]: "approved once by owner", ids["m-no"]: "declined by owner", ids["m-open"]: "open"}

    at_a, at_b = f"{a.address} ({window_of(daemon, a.pane)})", f"{b.address} ({window_of(daemon, b.pane)})"
    consent = [line for line in connectd(daemon, "audit", "--all").splitlines() if "  consent  " in line]
    assert len(consent) == 2, consent
    assert all(f"detail=from {at_a} to {at_b}" in line for line in consent), consent


def test_a_control_agent_is_listed_as_control_and_one_pane_is_one_pane(daemon: DaemonProcess) -> None:
    """Issue 23 item 8: `agents` showed a running control agent as CONNECT `custom`; doctor said "1 panes"."""
    doctor = connectd(daemon, "doctor")
    assert "; 1 pane in the directory" in doctor, doctor  # the fixture's one shell pane
    ctl = daemon.launch("ctl", "off", control=True)
    daemon.wait_ready(ctl)
    assert daemon.agent_view(ctl.pane)["connect"] == "control"
    header, *rows = connectd(daemon, "agents").splitlines()
    columns = header.split()
    row = next(r for r in rows if r.startswith(daemon.agent_view(ctl.pane)["address"])).split()
    assert row[columns.index("CONNECT")] == "control"
    assert "; 2 panes in the directory" in connectd(daemon, "doctor")


def test_history_search_outside_tmux_places_a_session_in_the_running_daemon_s_pane(
    tmp_path: Path, tmux: TmuxServer
) -> None:
    """Issue 23 item 8: `history search` outside tmux called a session running in the daemon's own pane
    (on a tmux server the CLI does not reach) "running elsewhere"."""
    session = "5b3a6e44-1c3e-4d52-9d6c-2f7e5c1d9a02"
    claude_root, codex_root = tmp_path / "claude", tmp_path / "codex"
    work = make_repo(tmp_path / "repo")
    Claude(session, str(work), branch="fix-login").prompt("fix the login redirect loop").write(claude_root)
    daemon = DaemonProcess(tmp_path, tmux).start()
    try:
        c = daemon.launch("c", "off", session=session)
        daemon.wait_ready(c)
        # Claude Code's registry of live processes names the agent's process (as Claude Code writes it)
        pid = int(tmux.display(c.pane, "#{pane_pid}"))
        stat = Path(f"/proc/{pid}/stat").read_text()
        proc_start = int(stat[stat.rindex(")") + 2:].split()[19])
        (claude_root / "sessions").mkdir(parents=True, exist_ok=True)
        (claude_root / "sessions" / f"{pid}.json").write_text(
            json.dumps({"pid": pid, "sessionId": session, "cwd": str(work), "startedAt": 0, "procStart": proc_start})
        )
        quiet = tmp_path / "no-tmux"  # no tmux server the CLI can reach by default
        quiet.mkdir()
        args = ("history", "search", "login", "--all", "--claude-root", str(claude_root), "--codex-root", str(codex_root))
        env = {"TMUX_TMPDIR": str(quiet)}
        text = connectd(daemon, *args, env=env)
        assert f"running in pane {c.pane} ({window_of(daemon, c.pane)})" in text, text
        found = json.loads(connectd(daemon, *args, "--json", env=env))
        assert [(s["session_id"], s["liveness"], s["pane"]) for s in found] == [(session, "running_in_pane", c.pane)]
        got = connectd(daemon, "history", "get", "claude", session, "--claude-root", str(claude_root),
                       "--codex-root", str(codex_root), env=env)
        assert f"running in pane {c.pane}" in got, got
    finally:
        daemon.stop()


def test_cards_prints_one_card_over_several_lines_with_commands_that_run_as_printed(daemon: DaemonProcess) -> None:
    """Found walking the README from a fresh clone: `connectd cards` printed each card on one line with
    its line breaks shown as `\\x0a` (the whole card went through the escaping meant for agent text),
    and its commands as `connectd approve ...`, which does not run from a checkout or without the data
    directory the daemon uses."""
    (a, b) = agents(daemon, "a", "b")
    assert not run(send, daemon, a, b.address, "line one\nline two", "m-lines")[0]
    card = daemon.wait_card()
    shown = connectd(daemon, "cards")
    assert "\\x0a" not in shown, shown
    lines = shown.splitlines()
    assert lines[0].startswith(f"{card['id']}  from "), lines
    approve = next(line.strip() for line in lines if "--pair" in line and "approve" in line)
    command = approve.split("   ")[0]  # the command, then its words
    assert f"approve {card['id']} --pair --data-dir {daemon.data_dir}" in command, approve
    assert "'line one\\nline two'" in shown  # the agent's text: shown as data, its newline escaped
    done = subprocess.run(  # the printed command, run as printed
        shlex.split(command), capture_output=True, text=True, timeout=60,
        env={**{k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 0, done.stderr
    assert wait_for(lambda: any("line one" in p for p in b.prompts()), 20, "delivered after the printed approve")
