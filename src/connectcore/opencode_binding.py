"""OpenCode's launch-token-to-session binding, as rules (checked on OpenCode 1.18.33).

OpenCode cannot be given a new session's id up front (``--session`` must name an existing session),
and everything it keeps on disk (``opencode.db``, ``log/opencode.log``) is shared by every OpenCode
process of the person, so neither names the process. What does: the process's own server. A
connected launch makes OpenCode listen on a loopback port connectd picked (``--port=P``), behind a
per-launch basic-auth password (``OPENCODE_SERVER_PASSWORD``); connectd then checks the listening
socket belongs to the pane's process tree, creates a session on that server (``POST /session``) and
selects it in the TUI (``POST /tui/select-session``). The id it created is the binding; anything
unclear leaves the pane unbound. docs/compatibility.md ("OpenCode") records what was checked.

Rules first, as data; then the values; then pure functions. Nothing here opens a socket or a file:
the daemon gathers the facts (listening sockets, the tree's socket inodes, the server's answers) and
asks these functions what they mean.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from connectcore.effects import Audit

# --------------------------------------------------------------------------------------------------
# Rules as data
# --------------------------------------------------------------------------------------------------

#: The environment variable OpenCode reads its server's basic-auth password from (user ``opencode``).
PASSWORD_ENV = "OPENCODE_SERVER_PASSWORD"
SERVER_USER = "opencode"
HOSTNAME = "127.0.0.1"

#: A session id as OpenCode 1.18.33 makes them (``ses_dc312b8eeffeukCeBPJfXsuyap``).
SESSION_ID_RE = re.compile(r"ses_[A-Za-z0-9]{1,120}")

#: Options a connected launch sets itself, so the launcher's own argv must not: the server's address
#: (``--port``, ``--hostname``, mDNS, which would default the hostname to 0.0.0.0) and ``--mini``,
#: which refuses ``--port``.
SERVER_FLAGS: tuple[str, ...] = ("--port", "--hostname", "--mdns", "--no-mdns", "--mdns-domain", "--mini")

#: Options that pick a session by id (the value follows, or comes after ``=``).
SESSION_ID_FLAGS: tuple[str, ...] = ("--session", "-s")
#: Options that pick a session without naming it.
SESSION_PICK_FLAGS: tuple[str, ...] = ("--continue", "-c", "--fork")

#: OpenCode's home screen (before a session is shown): its composer's placeholder quotes a tip,
#: ``Ask anything… "What is the tech stack of this project?"``; a session's empty composer shows none
#: (1.18.33, tests/fixtures/screens/opencode/). A selection counts once the TUI left it: one sent
#: before the TUI listened is lost, and the person's next prompt would then start another session.
HOME_SCREEN_RE = re.compile(r'Ask anything… "')
#: How long the daemon looks for the TUI to leave its home screen after the selection, in seconds.
SHOWN_WAIT = 15.0
#: How long the shown session settles before the binding counts, in seconds: 1.18.33 redraws the
#: session view for a few seconds after the switch and drops keys typed meanwhile (seen here: text
#: typed 0.3-1.5 s after the selection was lost, at 3 s it was taken).
SHOWN_SETTLE = 5.0
#: How often the daemon looks, until the TUI left its home screen, in seconds.
SHOWN_LOOK_EVERY = 0.2

#: The server's paths (relative to ``http://127.0.0.1:P``).
CREATE_PATH = "/session"
SELECT_PATH = "/tui/select-session"


class Step(StrEnum):
    """What the daemon does to bind an OpenCode launch."""

    CREATE_AND_SELECT = "create_and_select"  # a new session: create it on the process's server, select it
    KNOWN = "known"  # the launch names its session (a resume): bound from the launch
    UNBOUND = "unbound"  # nothing exact to bind by


class Refusal(StrEnum):
    """Why an OpenCode pane stays unbound."""

    SESSION_PICKED = "session_picked"  # the launcher's argv picks a session without naming it
    NO_LISTENER = "no_listener"  # nothing listens on the launch's port (yet)
    FOREIGN_LISTENER = "foreign_listener"  # the port's listener is not in the pane's process tree
    SERVER_REFUSED = "server_refused"  # the server answered with an error status (401: wrong password)
    BAD_ANSWER = "bad_answer"  # the server's answer is not one well-formed session / not ``true``
    NOT_SHOWN = "not_shown"  # the TUI still showed its home screen after the selection (it may be lost)
    FAILED = "failed"  # the binding step itself failed (an I/O error the daemon could not read past)


#: Why the pane stays unbound, in words for the person (the page and ``connectd agents`` show them).
REFUSAL_WORDS: Mapping[Refusal, str] = {
    Refusal.SESSION_PICKED: "its launcher picks a session without naming it (--continue, --fork): not bound",
    Refusal.NO_LISTENER: "nothing listened on the launch's port in time: not bound",
    Refusal.FOREIGN_LISTENER: "the launch's port is held by a process outside the pane: not bound, never talked to",
    Refusal.SERVER_REFUSED: "OpenCode's server refused the launch's password or the call: not bound",
    Refusal.BAD_ANSWER: "OpenCode's server gave no single well-formed session: not bound",
    Refusal.NOT_SHOWN: "OpenCode did not show the session connectd selected: not bound",
    Refusal.FAILED: "the binding step failed: not bound",
}
#: While the binding runs (the page shows it until the session is bound or refused).
BINDING_WORDS = "binding its OpenCode session through the process's own server"

#: When the daemon runs the binding: once per incarnation of a launch that served on a port connectd
#: picked, after the pane reads as OpenCode idle (its TUI drew its composer, so it listens for the
#: selection: one sent before that would be lost), and only while the pane is not bound otherwise.
BIND_HARNESS = "opencode"
AUDIT_ACTOR = "connectd"
AUDIT_ACTION = "opencode.bind"


# --------------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShownLook:
    """What one look at the pane after the selection means (:func:`shown_look`): the verdict
    (``shown``: True or False), or None and the next look ``after`` seconds (``settling``: that look
    is the one after the settle)."""

    shown: bool | None
    after: float = 0.0
    settling: bool = False


@dataclass(frozen=True)
class BindPlan:
    step: Step
    session_id: str | None = None
    reason: Refusal | None = None


# --------------------------------------------------------------------------------------------------
# Functions
# --------------------------------------------------------------------------------------------------


def bind_due(*, harness: str, idle: bool, bound: bool, started: bool) -> bool:
    """Whether to run the binding now for a pane whose launch served on a port connectd picked:
    the pane reads as OpenCode waiting for input (``harness``, ``idle``), it is not bound to a session
    yet (``bound``), and the binding has not been started for this incarnation (``started``: it runs
    once; its refusal is final, never retried into a guess)."""
    return harness == BIND_HARNESS and idle and not bound and not started


def ready_for_message(ready: bool, *, binding: bool) -> bool:
    """What the core hears of an OpenCode launch's readiness: never ready while its binding is due or
    runs (the selection switches the TUI's session, and keys typed around it are lost)."""
    return ready and not binding


def shows_home_screen(text: str) -> bool:
    """Whether a capture of the pane still shows OpenCode's home screen (no session shown)."""
    return HOME_SCREEN_RE.search(text) is not None


def shown_look(text: str, *, elapsed: float, settling: bool) -> ShownLook:
    """What a capture of the pane (``text``), taken ``elapsed`` seconds after the selection, says of
    whether the TUI shows the session: the session counts as shown only if the TUI left its home
    screen within ``SHOWN_WAIT`` seconds (a capture that ends later does not count; one looks every
    ``SHOWN_LOOK_EVERY`` seconds until then) and, ``SHOWN_SETTLE`` seconds later, still shows it
    (``settling``: this is that last look). The daemon only captures when told."""
    home = shows_home_screen(text)
    if settling:
        return ShownLook(not home)
    if elapsed > SHOWN_WAIT:
        return ShownLook(False)
    if not home:
        return ShownLook(None, SHOWN_SETTLE, settling=True)
    if elapsed + SHOWN_LOOK_EVERY >= SHOWN_WAIT:
        return ShownLook(False)
    return ShownLook(None, SHOWN_LOOK_EVERY)


def bind_result(found: str | Refusal, *, shown: bool) -> str | Refusal:
    """What counts as bound: a session the server created and selected (``found``) binds only if the
    TUI showed it (:func:`shown_look`), else ``not_shown``; a refusal stays what it was."""
    if isinstance(found, Refusal) or shown:
        return found
    return Refusal.NOT_SHOWN


def bind_audit(pane_id: str, result: str | Refusal, *, at: float) -> Audit:
    """The audit line of one binding: ``bound`` with the session id, or ``refused`` with the reason."""
    if isinstance(result, Refusal):
        return Audit(AUDIT_ACTOR, AUDIT_ACTION, "refused", target=pane_id, detail=str(result), at=at)
    if not SESSION_ID_RE.fullmatch(result):
        raise ValueError(f"an OpenCode session id looks like ses_..., got {result!r}")
    return Audit(AUDIT_ACTOR, AUDIT_ACTION, "bound", target=pane_id, detail=result, at=at)


def check_port(port: object) -> int:
    """``port`` if it is an int in 1..65535, else ValueError."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"an OpenCode server port must be an integer in 1..65535, got {port!r}")
    return port


def server_args(port: int) -> tuple[str, ...]:
    """The arguments that make OpenCode serve on ``127.0.0.1:port`` and nowhere else (``=`` forms:
    OpenCode counts ``--port=P`` as an explicit port, which overrides the person's ``server.*``)."""
    return (f"--port={check_port(port)}", f"--hostname={HOSTNAME}", "--mdns=false")


def _options(argv: Sequence[str]) -> list[str]:
    """The arguments after the program, up to a ``--``."""
    out: list[str] = []
    for arg in argv[1:]:
        if arg == "--":
            break
        out.append(arg)
    return out


def server_flag_in(argv: Sequence[str]) -> str | None:
    """The first option in ``argv`` that a connected launch must set itself, else None."""
    for arg in _options(argv):
        name = arg.split("=", 1)[0]
        if name in SERVER_FLAGS:
            return name
    return None


def session_in_argv(argv: Sequence[str]) -> tuple[bool, str | None]:
    """Whether ``argv`` picks a session, and its id when it names one well-formed id (else None)."""
    options = _options(argv)
    picked, named = False, None
    for i, arg in enumerate(options):
        name, eq, value = arg.partition("=")
        if name in SESSION_ID_FLAGS:
            picked = True
            if not eq:
                value = options[i + 1] if i + 1 < len(options) else ""
            named = value if SESSION_ID_RE.fullmatch(value) and named in (None, value) else ""
        elif name in SESSION_PICK_FLAGS:
            picked = True
    fork = any(arg.split("=", 1)[0] == "--fork" for arg in options)
    return picked, (named or None) if not fork else None


def plan(argv: Sequence[str], *, resumed: str | None = None) -> BindPlan:
    """How to bind a connected OpenCode launch of ``argv``; ``resumed`` is the session a resume names.

    A resume, or an argv naming exactly one session (and not forking it), is bound from the launch;
    an argv that picks a session some other way (``--continue``, ``--fork``) is left unbound; a new
    launch creates and selects its session on the process's server."""
    if resumed is not None:
        if not SESSION_ID_RE.fullmatch(resumed):
            return BindPlan(Step.UNBOUND, reason=Refusal.BAD_ANSWER)
        return BindPlan(Step.KNOWN, session_id=resumed)
    picked, named = session_in_argv(argv)
    if named is not None:
        return BindPlan(Step.KNOWN, session_id=named)
    if picked:
        return BindPlan(Step.UNBOUND, reason=Refusal.SESSION_PICKED)
    return BindPlan(Step.CREATE_AND_SELECT)


def listener_refusal(port: int, listeners: Mapping[int, frozenset[int]], tree_sockets: frozenset[int]) -> Refusal | None:
    """Whether the socket listening on 127.0.0.1:``port`` belongs to the pane's process tree.

    ``listeners`` maps a listening loopback port to the inodes of its sockets (``/proc/net/tcp``,
    ``tcp6``); ``tree_sockets`` holds the socket inodes the pane's process tree has open. None when
    every listener on the port is the tree's; otherwise why not."""
    inodes = listeners.get(port, frozenset())
    if not inodes:
        return Refusal.NO_LISTENER
    if not inodes <= tree_sockets:
        return Refusal.FOREIGN_LISTENER
    return None


def created_session(status: int, body: object, *, directory: str) -> str | Refusal:
    """The id of the session ``POST /session`` created, or why the answer does not bind: a 2xx with
    one root session (no parent) for ``directory`` and a well-formed id."""
    if not 200 <= status < 300:
        return Refusal.SERVER_REFUSED
    if not isinstance(body, dict):
        return Refusal.BAD_ANSWER
    sid, parent, where = body.get("id"), body.get("parentID"), body.get("directory")
    if not isinstance(sid, str) or not SESSION_ID_RE.fullmatch(sid) or parent is not None or where != directory:
        return Refusal.BAD_ANSWER
    return sid


def selected(status: int, body: object) -> Refusal | None:
    """None when ``POST /tui/select-session`` answered ``true``; otherwise why it does not bind."""
    if not 200 <= status < 300:
        return Refusal.SERVER_REFUSED
    return None if body is True else Refusal.BAD_ANSWER
