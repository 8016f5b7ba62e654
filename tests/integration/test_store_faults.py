"""The data directory's file system full, or turned read-only, while a real daemon serves (a real
tmpfs mount; a real ext4 file system on a loop device that an error turns read-only).

Claim: while the store cannot write, every call that would write gets a clear error naming the cause
(agents: the tool's error; the person: 503 ``store_unavailable``), nothing is typed, nothing that was
not acknowledged is stored, nothing acknowledged is lost, the daemon keeps serving, and it works again
as soon as space (or write access) returns.

A read-only remount is refused by the kernel while the daemon holds its database open for writing;
what does turn a file system read-only under a running program is an error: ext4 mounted with
``errors=remount-ro`` goes read-only at once when its ``trigger_fs_error`` is written, as it would on a
failing disk. Recovering from that takes a stop, a file system check and a new start.

Mounting needs root (CI runs as root); without it the test fails saying so, it never skips.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.support.daemon import AgentHandle, DaemonProcess, call, mcp_agent, wait_for
from tests.support.fixtures import running_daemon, tmux_session
from tests.support.tmux_server import TmuxServer

UNAVAILABLE = "store_unavailable"


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail("mounting a small tmpfs for the data directory needs root (run the suite as root, as CI does)")
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def daemon(small_fs: Path) -> Iterator[DaemonProcess]:
    with tmux_session("connect-store-faults") as tmux, running_daemon(small_fs, tmux) as d:
        yield d


def _send(daemon: DaemonProcess, sender: AgentHandle, to: str, text: str, message_id: str) -> tuple[bool, object]:
    async def go() -> tuple[bool, object]:
        assert sender.token
        async with mcp_agent(daemon.mcp_url, sender.token) as client:
            return await call(client, "send_message", to=to, text=text, message_id=message_id)

    return anyio.run(go)


def _list(daemon: DaemonProcess, agent: AgentHandle) -> tuple[bool, object]:
    async def go() -> tuple[bool, object]:
        assert agent.token
        async with mcp_agent(daemon.mcp_url, agent.token) as client:
            return await call(client, "list_agents")

    return anyio.run(go)


def _fill(mount: Path) -> Path:
    filler = mount / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True, check=False)
    return filler


def _message_ids(daemon: DaemonProcess) -> list[str]:
    return [m["message_id"] for m in daemon.api("GET", "/api/messages")]


def _assert_clear(answer: tuple[bool, object]) -> None:
    is_error, text = answer
    assert is_error, answer
    assert UNAVAILABLE in str(text) and "nothing was changed" in str(text), text


def test_a_full_data_directory_refuses_clearly_loses_nothing_and_recovers(daemon: DaemonProcess, small_fs: Path) -> None:
    a, b = daemon.launch("a"), daemon.launch("b")
    daemon.wait_ready(b)
    err, queued = _send(daemon, a, b.address, "before the disk filled", "m-1")
    assert not err and queued["outcome"] == "queued", queued  # type: ignore[index]
    card = daemon.wait_card()

    filler = _fill(small_fs)
    _assert_clear(_send(daemon, a, b.address, "while full", "m-2"))
    _assert_clear(_list(daemon, a))
    refused = daemon.http().post(f"/api/cards/{card['id']}/approve", json={})
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"] == UNAVAILABLE and "nothing was changed" in refused.json()["message"]
    assert daemon.proc is not None and daemon.proc.poll() is None, "the daemon ended"
    assert b.prompts() == [], "typed while its record could not be written"
    assert daemon.cards()[0]["id"] == card["id"], "the acknowledged message's card was lost"

    filler.unlink()
    daemon.api("POST", f"/api/cards/{card['id']}/approve", {})
    wait_for(lambda: any("before the disk filled" in p for p in b.prompts()), 15, "the acknowledged message delivered")
    assert sum("before the disk filled" in p for p in b.prompts()) == 1
    assert "m-2" not in _message_ids(daemon), "a refused message was stored"
    err, listed = _list(daemon, a)
    assert not err, listed


def test_a_delivery_due_while_the_disk_is_full_waits_for_its_record_and_is_typed_once(
    daemon: DaemonProcess, small_fs: Path
) -> None:
    a, b = daemon.launch("a"), daemon.launch("b")
    daemon.wait_ready(b)
    err, _ = _send(daemon, a, b.address, "first, to approve the pair", "m-pair")
    assert not err
    daemon.api("POST", f"/api/cards/{daemon.wait_card()['id']}/approve", {"pair": True})
    wait_for(lambda: any("first, to approve the pair" in p for p in b.prompts()), 15, "the first message delivered")
    daemon.wait_ready(b)
    daemon.tmux.tmux("send-keys", "-t", b.pane, "-l", "/busy 3")
    daemon.tmux.tmux("send-keys", "-t", b.pane, "Enter")
    wait_for(lambda: daemon.agent_view(b.pane)["activity"] == "busy", 10, "b busy")
    err, queued = _send(daemon, a, b.address, "due while the disk is full", "m-due")
    assert not err and queued["outcome"] == "queued", queued  # type: ignore[index]

    filler = _fill(small_fs)
    # the turn ends and the message falls due: its guard cannot write "typing started", so it fails
    # (and is retried) instead of typing
    wait_for(lambda: "failed: StoreUnavailable" in daemon.log_text(), 20, "the guard refused by the full store")
    anyio.run(anyio.sleep, 1.0)
    assert not any("due while the disk is full" in p for p in b.prompts()), "typed without its durable record"
    assert daemon.proc is not None and daemon.proc.poll() is None, "the daemon ended"

    filler.unlink()
    wait_for(lambda: any("due while the disk is full" in p for p in b.prompts()), 20, "delivered once space returned")
    anyio.run(anyio.sleep, 1.0)
    assert sum("due while the disk is full" in p for p in b.prompts()) == 1


@pytest.fixture
def ext4_data_dir(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """An ext4 file system on a loop device, mounted errors=remount-ro where the daemon keeps its data."""
    if os.geteuid() != 0:
        pytest.fail("mounting an ext4 loop device for the data directory needs root (run the suite as root, as CI does)")
    image, mount = tmp_path / "data.img", tmp_path / "data"
    mount.mkdir()
    subprocess.run(["truncate", "-s", "32M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True)
    device = subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True, text=True).stdout.strip()
    try:
        subprocess.run(["mount", "-o", "errors=remount-ro", device, str(mount)], check=True)
        yield mount, device
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        subprocess.run(["losetup", "-d", device], check=False)


def _turn_read_only(device: str, mount: Path) -> None:
    Path(f"/sys/fs/ext4/{Path(device).name}/trigger_fs_error").write_text("connect test: the disk failed\n")
    wait_for(lambda: _refuses_writes(mount), 5, "the file system read-only")


def _refuses_writes(mount: Path) -> bool:
    """(statvfs does not show ext4's emergency read-only: a write attempt does.)"""
    try:
        (mount / "probe").write_text("x")
    except OSError:
        return True
    return False


def test_a_data_directory_turned_read_only_refuses_clearly_types_nothing_and_loses_nothing(
    tmp_path: Path, ext4_data_dir: tuple[Path, str]
) -> None:
    mount, device = ext4_data_dir
    with TmuxServer("connect-store-ro") as tmux:
        tmux.new_session("main", width=160, height=40)
        daemon = DaemonProcess(tmp_path, tmux).start()
        assert daemon.data_dir == mount
        try:
            a, b = daemon.launch("a"), daemon.launch("b")
            daemon.wait_ready(b)
            err, queued = _send(daemon, a, b.address, "acknowledged before the disk failed", "m-1")
            assert not err and queued["outcome"] == "queued", queued  # type: ignore[index]
            card = daemon.wait_card()

            _turn_read_only(device, mount)
            _assert_clear(_send(daemon, a, b.address, "while read-only", "m-2"))
            refused = daemon.http().post(f"/api/cards/{card['id']}/approve", json={})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == UNAVAILABLE and "nothing was changed" in refused.json()["message"]
            assert daemon.proc is not None and daemon.proc.poll() is None, "the daemon ended"
            assert b.prompts() == [], "typed while its record could not be written"
        finally:
            daemon.stop()
        # The person's way back: stop, check the file system, mount it again, start.
        subprocess.run(["umount", str(mount)], check=True)
        fsck = subprocess.run(["e2fsck", "-fy", device], capture_output=True, text=True)
        assert fsck.returncode in (0, 1), fsck.stdout + fsck.stderr
        subprocess.run(["mount", "-o", "errors=remount-ro", device, str(mount)], check=True)
        daemon.start()
        try:
            assert [c["id"] for c in daemon.cards()] == [card["id"]], "the acknowledged message's card was lost"
            assert "m-2" not in _message_ids(daemon), "a refused message was stored"
            daemon.api("POST", f"/api/cards/{card['id']}/approve", {})
            wait_for(lambda: any("acknowledged before the disk failed" in p for p in b.prompts()), 20, "delivered after the restart")
            anyio.run(anyio.sleep, 1.0)
            assert sum("acknowledged before the disk failed" in p for p in b.prompts()) == 1
        finally:
            daemon.stop()
