"""Whether the process listening on the daemon's recorded port is the daemon, before the CLI hands it
the owner token (issue 11, item 3).

Rules:

- The CLI sends a credential only to a listening socket on ``127.0.0.1:<port>`` that belongs to our
  user (the uid column of ``/proc/net/tcp``) and is held open by the recorded daemon process (its
  inode among ``/proc/<pid>/fd`` links, which only a process of the same user, or root, can read).
- No listener, a listener of another user, a listener the recorded process does not hold, or a
  recorded process that is gone: refused, with the words saying which.

Pure: the caller reads ``/proc`` and passes the text and the inodes.
"""

from __future__ import annotations

from dataclasses import dataclass

LISTEN = "0A"
LOOPBACK_HEX = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it (little-endian on every Linux arch)


@dataclass(frozen=True)
class Listener:
    port: int
    uid: int
    inode: int


def listeners(tcp_table: str, port: int) -> list[Listener]:
    """The sockets listening on 127.0.0.1:``port`` (or every IPv4 address) in ``/proc/net/tcp`` text."""
    found = []
    for line in tcp_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        address, _, port_hex = fields[1].partition(":")
        try:
            here = int(port_hex, 16)
            uid, inode = int(fields[7]), int(fields[9])
        except ValueError:
            continue
        if here == port and address in (LOOPBACK_HEX, "00000000"):
            found.append(Listener(here, uid, inode))
    return found


def refusal(
    tcp_table: str, *, port: int, pid: int, uid: int, pid_alive: bool, pid_uid: int | None, socket_inodes: frozenset[int]
) -> str | None:
    """Why the listener on ``port`` must not get the owner token, or None when it is our daemon.

    ``socket_inodes``: the inodes of the ``socket:[N]`` links in ``/proc/<pid>/fd``.
    """
    if not pid_alive:
        return f"the daemon recorded in daemon.json (pid {pid}) is not running"
    if pid_uid != uid:
        return f"process {pid} recorded in daemon.json belongs to another user (uid {pid_uid})"
    found = listeners(tcp_table, port)
    if not found:
        return f"nothing listens on 127.0.0.1:{port}"
    for listener in found:
        if listener.uid != uid:
            return f"the listener on 127.0.0.1:{port} belongs to another user (uid {listener.uid})"
        if listener.inode not in socket_inodes:
            return f"the listener on 127.0.0.1:{port} is not held by the daemon recorded in daemon.json (pid {pid})"
    return None
