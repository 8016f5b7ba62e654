"""Grants and identity: who an agent is, what it may do, and how that is taken away at once.

Rules (specification: shared/seeds/000, "Scopes", "Where the grant lives", "Revocation"):

- Scopes are ``read``, ``history``, ``message``, ``reachable`` and ``act``. The presets are Off,
  Observe (read + history) and Collaborate (+ message, reachable). ``act`` is never grantable to an
  ordinary agent; only the control role holds it.
- A grant is stored against the agent session ``(harness, session id)``. Before the session id is
  known, a launch token is bound to the pane and process incarnation, and the grant stays on the
  token's principal until an unambiguous binding attaches the session id as an alias.
- The daemon keeps one immutable internal principal per launch token. Message ids, rate and hop
  counters and pair approvals key on the principal. When the session id becomes known it is attached
  to the principal atomically; a resumed agent's new token joins the same principal through it.
  Rebinding resets nothing.
- Revocation invalidates every token of the principal at once; the next call fails "not connected".
  A token also ends when the process incarnation it was bound to ends. A new agent in a recycled pane
  id inherits nothing: tokens are bound to incarnations, not pane ids.
- Actor naming: ``agent:<harness>:<session id>``, before the id is known
  ``agent:<harness>:pane:<pane id>:<pid>``. The rebinding is itself an audit record.

Tokens never enter the core in plain text: the daemon hashes them and passes the hash.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum

from connectcore._machine import ConnectError, Table
from connectcore.effects import Audit, Effect, EndSubscriptions, Notify, Persist


class Scope(StrEnum):
    READ = "read"
    HISTORY = "history"
    MESSAGE = "message"
    REACHABLE = "reachable"
    ACT = "act"


class Preset(StrEnum):
    OFF = "off"
    OBSERVE = "observe"
    COLLABORATE = "collaborate"


PRESET_SCOPES: dict[Preset, frozenset[Scope]] = {
    Preset.OFF: frozenset(),
    Preset.OBSERVE: frozenset({Scope.READ, Scope.HISTORY}),
    Preset.COLLABORATE: frozenset({Scope.READ, Scope.HISTORY, Scope.MESSAGE, Scope.REACHABLE}),
}
PRESET_ORDER: tuple[Preset, ...] = (Preset.OFF, Preset.OBSERVE, Preset.COLLABORATE)
GRANTABLE: frozenset[Scope] = frozenset({Scope.READ, Scope.HISTORY, Scope.MESSAGE, Scope.REACHABLE})
CONTROL_SCOPES: frozenset[Scope] = frozenset(Scope)


class TokenState(StrEnum):
    LIVE = "live"  # valid; bound to a pane and process incarnation
    REVOKED = "revoked"  # the person turned Connect off
    ENDED = "ended"  # the incarnation it was bound to is gone


TOKEN_TABLE: Table[TokenState] = Table(
    name="token",
    initial=TokenState.LIVE,
    finals=frozenset({TokenState.REVOKED, TokenState.ENDED}),
    edges=(
        (TokenState.LIVE, "revoke", TokenState.REVOKED),
        (TokenState.LIVE, "incarnation_ended", TokenState.ENDED),
    ),
)


class GrantError(ConnectError):
    """A grant the rules do not allow (act for an ordinary agent, above the policy cap, unknown)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class NotConnected(ConnectError):
    """The token is unknown, revoked or ended: the agent is not connected."""

    reason = "not_connected"

    def __init__(self, message: str = "not connected") -> None:
        super().__init__(message)


class ScopeDenied(ConnectError):
    """The principal is connected but its grant lacks the scope this call needs."""

    reason = "scope_denied"

    def __init__(self, scope: Scope, actor: str) -> None:
        super().__init__(f"{actor} lacks the {scope.value!r} scope for this call")
        self.scope = scope


SessionKey = tuple[str, str]  # (harness, session id)


@dataclass(frozen=True)
class Principal:
    """One immutable internal identity, created at launch, never reset."""

    id: str
    harness: str
    pane_id: str
    pid: int
    incarnation: str
    created_at: float
    session: SessionKey | None = None
    control: bool = False
    merged_into: str | None = None  # set when a later binding showed it is an existing principal


@dataclass(frozen=True)
class TokenRecord:
    token_hash: str
    principal: str
    incarnation: str
    pane_id: str
    pid: int
    state: TokenState = TokenState.LIVE
    issued_at: float = 0.0
    # Issued to a running process connect did not give an endpoint (the per-pane toggle's connect in
    # place): the token is never revealed, the agent can receive but holds no tools until its next
    # launch by connect. Persisted, so a daemon restart still says so (:func:`receive_only`).
    in_place: bool = False


@dataclass(frozen=True)
class GrantBook:
    principals: dict[str, Principal] = field(default_factory=dict)
    tokens: dict[str, TokenRecord] = field(default_factory=dict)
    aliases: dict[SessionKey, str] = field(default_factory=dict)
    # Grants are keyed by ("session", harness, session id) or, before binding, ("principal", id).
    grants: dict[tuple[str, ...], frozenset[Scope]] = field(default_factory=dict)
    cap: Preset = Preset.COLLABORATE


def actor_name(principal: Principal) -> str:
    """The audit actor, as the specification names it."""
    if principal.control and principal.session is None:
        return f"control:{principal.harness}:pane:{principal.pane_id}:{principal.pid}"
    if principal.session is not None:
        return f"agent:{principal.session[0]}:{principal.session[1]}"
    return f"agent:{principal.harness}:pane:{principal.pane_id}:{principal.pid}"


def scopes_for_preset(preset: Preset) -> frozenset[Scope]:
    return PRESET_SCOPES[preset]


def preset_of(scopes: frozenset[Scope]) -> Preset | None:
    """The preset these scopes are exactly, or None for an advanced (single-scope) grant."""
    for preset, exact in PRESET_SCOPES.items():
        if scopes == exact:
            return preset
    return None


def connect_label(principal: Principal | None, scopes: frozenset[Scope]) -> str:
    """What a pane's Connect shows (the fleet list, ``connectd agents``, ``launch --here``): ``off``
    with no connected agent, ``control`` for the control role (its act scope is no preset), else the
    preset its scopes are exactly, else ``custom`` (an advanced grant)."""
    if principal is None:
        return "off"
    if principal.control:
        return "control"
    preset = preset_of(scopes)
    return preset.value if preset is not None else "custom"


def check_grantable(scopes: frozenset[Scope], cap: Preset, *, control: bool = False) -> None:
    """Raise :class:`GrantError` unless ``scopes`` may be granted under the policy ``cap``."""
    if control:
        return
    if Scope.ACT in scopes:
        raise GrantError("act_not_grantable", "the act scope is never grantable to an ordinary agent")
    allowed = PRESET_SCOPES[cap]
    over = scopes - allowed
    if over:
        names = ", ".join(sorted(s.value for s in over))
        raise GrantError("over_cap", f"policy caps grants at {cap.value}; {names} not allowed")


def canonical(book: GrantBook, principal_id: str) -> str:
    """The principal a merged one now lives on (bounded walk: merges never chain into a loop)."""
    seen: set[str] = set()
    current = principal_id
    while current not in seen:
        seen.add(current)
        nxt = book.principals[current].merged_into if current in book.principals else None
        if nxt is None:
            return current
        current = nxt
    raise ConnectError(f"principal merge loop at {principal_id}")  # pragma: no cover - guarded by bind


def group(book: GrantBook, principal_id: str) -> frozenset[str]:
    """Every principal id that is the same agent as ``principal_id`` (itself plus merged ones)."""
    root = canonical(book, principal_id)
    # A principal never merged is its own root: only merged ones need the walk.
    return frozenset(
        p
        for p, principal in book.principals.items()
        if p == root or (principal.merged_into is not None and canonical(book, p) == root)
    )


def _grant_key(principal: Principal) -> tuple[str, ...]:
    if principal.session is not None:
        return ("session", principal.session[0], principal.session[1])
    return ("principal", principal.id)


def scopes_of(book: GrantBook, principal_id: str) -> frozenset[Scope]:
    """What the principal may do now: its stored grant within the policy cap (control: everything).

    Every scope check reads this, so a cap lowered after a grant was given (policy.toml, read at
    daemon start) binds that grant at once; the stored grant itself is kept unchanged.
    """
    principal = book.principals[canonical(book, principal_id)]
    if principal.control:
        return CONTROL_SCOPES
    return book.grants.get(_grant_key(principal), frozenset()) & PRESET_SCOPES[book.cap]


def session_scopes(book: GrantBook, session: SessionKey) -> frozenset[Scope]:
    """The session's stored grant within the policy cap (what a launch or restart may give it)."""
    return book.grants.get(("session", session[0], session[1]), frozenset()) & PRESET_SCOPES[book.cap]


def restored_preset(book: GrantBook, session: SessionKey) -> Preset:
    """The preset a restored session comes back with: its stored grant within the cap when that is
    exactly a preset, else Off (an advanced grant, or none, is not relaunched with tools)."""
    return preset_of(session_scopes(book, session)) or Preset.OFF


def authenticate(book: GrantBook, token_hash: str) -> Principal:
    """The canonical principal behind a live token, or :class:`NotConnected`."""
    record = book.tokens.get(token_hash)
    if record is None or record.state is not TokenState.LIVE:
        raise NotConnected()
    principal = book.principals[canonical(book, record.principal)]
    if not principal.control and not scopes_of(book, principal.id):
        raise NotConnected()
    return principal


def authenticate_or_none(book: GrantBook, token_hash: str) -> Principal | None:
    try:
        return authenticate(book, token_hash)
    except NotConnected:
        return None


def require(book: GrantBook, principal: Principal, scope: Scope) -> None:
    if scope not in scopes_of(book, principal.id):
        raise ScopeDenied(scope, actor_name(principal))


def live_tokens(book: GrantBook, principal_id: str) -> tuple[TokenRecord, ...]:
    members = group(book, principal_id)
    return tuple(t for t in book.tokens.values() if t.principal in members and t.state is TokenState.LIVE)


def sending_token(book: GrantBook, principal_id: str) -> str | None:
    """The token hash a message of this principal's is submitted with when the daemon sends it on
    the principal's behalf (control's hand-off): its first live token; None: it is not connected."""
    tokens = live_tokens(book, principal_id)
    return tokens[0].token_hash if tokens else None


def principal_at(book: GrantBook, incarnation: str) -> Principal | None:
    """The canonical principal holding a live token for this pane incarnation, if any."""
    for record in book.tokens.values():
        if record.incarnation == incarnation and record.state is TokenState.LIVE:
            return book.principals[canonical(book, record.principal)]
    return None


def _advance_token(record: TokenRecord, event: str) -> TokenRecord:
    return replace(record, state=TOKEN_TABLE.next(record.state, event))


# --- transitions of the book ----------------------------------------------------------------------


def receive_only(book: GrantBook, incarnation: str, *, launched: bool) -> bool:
    """Connected, but its process holds no endpoint: a pane incarnation connected in place (a live
    in-place token), or a process connect did not launch."""
    return not launched or any(
        t.in_place for t in book.tokens.values() if t.incarnation == incarnation and t.state is TokenState.LIVE
    )


@dataclass(frozen=True)
class PaneToggle:
    """What the per-pane toggle does, decided by :func:`pane_toggle` before anything changes:
    set the grant of ``session`` (None: none), then revoke ``revoke`` (a principal id), then, when
    ``connect_in_place``, give the running incarnation a principal under that grant."""

    session: SessionKey | None
    revoke: str | None = None
    connect_in_place: bool = False


def pane_toggle(
    book: GrantBook, pane_id: str, incarnation: str, session: SessionKey | None, scopes: frozenset[Scope]
) -> PaneToggle:
    """The per-pane toggle, a shortcut for the one agent session in that pane (``session``: the
    pane's binding, else its principal's, by :func:`connectcore.directory.pane_session`). Off sets
    that session's grant to nothing and revokes the pane's principal (``not_connected`` when it has
    neither). A preset needs one session (``ambiguous_binding``), never control's for a pane that is
    not control (:func:`control_session_refusal`); a pane with no principal is then connected in
    place. Raises :class:`GrantError` with the reason; nothing changes."""
    principal = principal_at(book, incarnation)
    if not scopes:
        if principal is None and session is None:
            raise GrantError("not_connected", f"{pane_id} is not connected")
        return PaneToggle(session, principal.id if principal is not None else None)
    if session is None:
        raise GrantError(
            "ambiguous_binding", f"{pane_id} holds no unambiguously bound agent session: connect it at launch instead"
        )
    refused = control_session_refusal(book, session, control=principal is not None and principal.control)
    if refused is not None:
        raise refused
    return PaneToggle(session, connect_in_place=principal is None)


def control_session_refusal(book: GrantBook, session: SessionKey | None, *, control: bool) -> GrantError | None:
    """Why connecting a running pane in place to ``session`` is refused: it is the control role's
    session, and joining its principal would hand the pane ``act``. A pane's session there comes from
    evidence any process can write (a forged Claude registry record or Codex rollout name binds a
    hand-started pane to it once control's own pane is gone; found by
    tests/integration/test_session_binding_attacks.py). A launch by connect that resumes control's
    session (restart-to-connect, restore) stays control (:func:`connectcore.hub.acts.launches_control`):
    the person asked for that process. None when it may."""
    existing = book.aliases.get(session) if session is not None else None
    if session is None or existing is None or control:
        return None
    if not book.principals[canonical(book, existing)].control:
        return None
    return GrantError(
        "control_session",
        f"{session[0]} session {session[1]} is the control agent's: only a control launch may take it "
        "(connectd launch --control)",
    )


def issue_token(
    book: GrantBook,
    *,
    now: float,
    token_hash: str,
    principal_id: str,
    harness: str,
    pane_id: str,
    pid: int,
    incarnation: str,
    scopes: frozenset[Scope],
    session: SessionKey | None = None,
    control: bool = False,
    in_place: bool = False,
) -> tuple[GrantBook, Principal, tuple[Effect, ...]]:
    """Launch (or resume) an agent with a fresh token (``in_place``: a running process connected
    where it runs, its token never revealed: :attr:`TokenRecord.in_place`).

    ``principal_id`` is a fresh id the daemon generated; when ``session`` is already aliased to a
    principal (a resume), the token joins that principal instead and the fresh id is not used.
    """
    if token_hash in book.tokens:
        raise GrantError("token_reused", "this token was already issued")
    check_grantable(scopes, book.cap, control=control)
    effects: list[Effect] = []
    existing = book.aliases.get(session) if session is not None else None
    principals = dict(book.principals)
    aliases = dict(book.aliases)
    if existing is not None:
        principal = principals[canonical(book, existing)]
    else:
        if principal_id in principals:
            raise GrantError("principal_reused", f"principal id {principal_id} already exists")
        principal = Principal(
            id=principal_id,
            harness=harness,
            pane_id=pane_id,
            pid=pid,
            incarnation=incarnation,
            created_at=now,
            session=session,
            control=control,
        )
        principals[principal.id] = principal
        if session is not None:
            aliases[session] = principal.id
        effects.append(Persist("principal", (principal.id,), principal))
    token = TokenRecord(token_hash, principal.id, incarnation, pane_id, pid, issued_at=now, in_place=in_place)
    tokens = {**book.tokens, token_hash: token}
    grants = dict(book.grants)
    if not control:
        grants[_grant_key(principal)] = scopes
    new = replace(book, principals=principals, tokens=tokens, aliases=aliases, grants=grants)
    effects.append(Persist("token", (token_hash,), token))
    effects.append(Persist("grant", _grant_key(principal), scopes))
    effects.append(
        Audit(
            actor=actor_name(principal),
            action="launch_token",
            outcome="issued",
            target=f"{pane_id}@{incarnation}",
            detail=",".join(sorted(s.value for s in scopes)),
            at=now,
        )
    )
    return new, principal, tuple(effects)


def binding_refusal(book: GrantBook, principal_id: str, session: SessionKey) -> tuple[str, str] | None:
    """Why this principal may not bind ``session``, as (reason, words), or None when it may bind.

    Session evidence (a rollout file name, a registry entry, a server's answer) is written by
    processes the person did not vouch for, so a binding may keep or lower what the pane's token was
    given, never raise it: it never joins a control principal (``control_session``), and never takes
    a session grant wider than the one the person gave this pane's token (``would_raise``). Nor does
    it take a session another principal's process still runs (``session_held``,
    :func:`held_by_another`): a live agent's session is its own. A merge into a principal that no
    longer runs, with an equal or narrower grant, stays allowed: a resume whose token was issued
    before its session was known is one.
    """
    root_id = canonical(book, principal_id)
    pending = book.grants.get(("principal", root_id), frozenset())
    existing = book.aliases.get(session)
    if existing is not None and canonical(book, existing) != root_id:
        target = book.principals[canonical(book, existing)]
        if target.control:
            return ("control_session", "the session is the control agent's")
        stored = book.grants.get(_grant_key(target), pending)
    else:
        stored = book.grants.get(("session", session[0], session[1]), pending)
    if not stored <= pending:
        wider = ",".join(sorted(s.value for s in stored - pending))
        return ("would_raise", f"the session's grant ({wider}) exceeds what this pane was given")
    holder = held_by_another(book, root_id, session)
    if holder is not None:
        return ("session_held", f"{holder} still runs it")
    return None


def held_by_another(book: GrantBook, principal_id: str, session: SessionKey) -> str | None:
    """The actor of another principal whose process still runs (a live token) on ``session``, or
    None. Evidence read from a pane (a file, a registry record, a server's answer) binds only to a
    session nobody else is running: a live agent's session is its own, not a name to take."""
    existing = book.aliases.get(session)
    if existing is None:
        return None
    target = canonical(book, existing)
    if target == canonical(book, principal_id):
        return None
    if any(t.state is TokenState.LIVE and canonical(book, t.principal) == target for t in book.tokens.values()):
        return actor_name(book.principals[target])
    return None


def bind_session(
    book: GrantBook, *, now: float, principal_id: str, session: SessionKey
) -> tuple[GrantBook, tuple[Effect, ...]]:
    """Attach the session id to a principal as an alias, atomically, resetting nothing.

    If the session already belongs to another principal (a resume whose token was issued before
    its session was known), this principal is merged into that one: its tokens now act as that
    agent, and the grant on the session wins. Both principals' ids, counters and approvals stay
    reachable through :func:`group`.
    """
    root_id = canonical(book, principal_id)
    principal = book.principals[root_id]
    if principal.session == session:
        return book, ()
    if principal.session is not None:
        raise GrantError(
            "already_bound",
            f"{actor_name(principal)} is already bound to a different session",
        )
    if session[0] != principal.harness:
        raise GrantError(
            "harness_mismatch", f"a {session[0]} session cannot bind a {principal.harness} agent"
        )
    before = actor_name(principal)
    existing = book.aliases.get(session)
    pending = book.grants.get(("principal", principal.id), frozenset())
    refusal = binding_refusal(book, root_id, session)
    if refusal is not None:
        raise GrantError(refusal[0], f"{before} cannot bind {session[0]} session {session[1]}: {refusal[1]}")
    principals = dict(book.principals)
    grants = dict(book.grants)
    grants.pop(("principal", principal.id), None)
    if existing is not None and canonical(book, existing) != root_id:
        target = principals[canonical(book, existing)]
        principals[root_id] = replace(principal, merged_into=target.id)
        key = _grant_key(target)
        grants[key] = grants.get(key, pending)
        effects: list[Effect] = [Persist("principal", (root_id,), principals[root_id])]
        after = actor_name(target)
    else:
        bound = replace(principal, session=session)
        principals[root_id] = bound
        grants[_grant_key(bound)] = grants.get(_grant_key(bound), pending)
        effects = [Persist("principal", (root_id,), bound)]
        after = actor_name(bound)
        key = _grant_key(bound)
    aliases = {**book.aliases, session: canonical(replace(book, principals=principals), root_id)}
    new = replace(book, principals=principals, aliases=aliases, grants=grants)
    if ("principal", principal.id) in book.grants:
        effects.append(Persist("grant", ("principal", principal.id), None))  # moved to the session
    effects.append(Persist("grant", key, grants[key]))
    effects.append(Audit(actor=after, action="rebind", outcome="bound", target=before, at=now))
    return new, tuple(effects)


def set_grant(
    book: GrantBook, *, now: float, session: SessionKey, scopes: frozenset[Scope], by: str = "owner"
) -> tuple[GrantBook, tuple[Effect, ...]]:
    """Set the scopes of an agent session. Narrowing takes effect on the next call; Off revokes.

    Widening a running agent's grant needs a token it already holds; an agent with no live token
    gets the endpoint only at its next launch or resume (granting is slow and visible).
    """
    check_grantable(scopes, book.cap)
    grants = {**book.grants, ("session", session[0], session[1]): scopes}
    new = replace(book, grants=grants)
    effects: list[Effect] = [
        Persist("grant", ("session", session[0], session[1]), scopes),
        Audit(
            actor=by,
            action="grant",
            outcome="set",
            target=f"agent:{session[0]}:{session[1]}",
            detail=",".join(sorted(s.value for s in scopes)) or "off",
            at=now,
        ),
        Notify("grant", (session[0], session[1])),
    ]
    return new, tuple(effects)


def revoke(
    book: GrantBook, *, now: float, principal_id: str, by: str = "owner"
) -> tuple[GrantBook, tuple[Effect, ...]]:
    """Turn Connect off for a principal: every live token invalid at once, the grant Off."""
    root = canonical(book, principal_id)
    principal = book.principals[root]
    tokens = dict(book.tokens)
    effects: list[Effect] = []
    for record in live_tokens(book, root):
        tokens[record.token_hash] = _advance_token(record, "revoke")
        effects.append(Persist("token", (record.token_hash,), tokens[record.token_hash]))
    grants = {**book.grants, _grant_key(principal): frozenset()}
    effects.append(Persist("grant", _grant_key(principal), frozenset()))
    principals = book.principals
    if principal.control:  # stopping control ends the role for good: its scopes go, not only its token
        principals = {**book.principals, root: replace(principal, control=False)}
        effects.append(Persist("principal", (root,), principals[root]))
    effects.append(EndSubscriptions(root))
    effects.append(Audit(actor=by, action="revoke", outcome="revoked", target=actor_name(principal), at=now))
    effects.append(Notify("grant", (root,)))
    return replace(book, principals=principals, tokens=tokens, grants=grants), tuple(effects)


def end_incarnation(book: GrantBook, *, now: float, incarnation: str) -> tuple[GrantBook, tuple[Effect, ...]]:
    """The process a token was bound to is gone: its tokens end. The grant on the session stays."""
    tokens = dict(book.tokens)
    effects: list[Effect] = []
    for record in book.tokens.values():
        if record.incarnation == incarnation and record.state is TokenState.LIVE:
            tokens[record.token_hash] = _advance_token(record, "incarnation_ended")
            effects.append(Persist("token", (record.token_hash,), tokens[record.token_hash]))
            effects.append(EndSubscriptions(canonical(book, record.principal)))
    return replace(book, tokens=tokens), tuple(effects)


def principals_of_session(book: GrantBook, session: SessionKey) -> tuple[str, ...]:
    root = book.aliases.get(session)
    return (canonical(book, root),) if root is not None else ()


def all_connected(book: GrantBook) -> tuple[str, ...]:
    """Canonical principals that hold a live token and a non-empty grant (for disconnect-all)."""
    roots: dict[str, None] = {}
    for record in book.tokens.values():
        if record.state is TokenState.LIVE:
            roots[canonical(book, record.principal)] = None
    return tuple(p for p in roots if not book.principals[p].control)


def with_cap(book: GrantBook, cap: Preset) -> GrantBook:
    return replace(book, cap=cap)


def restore(
    principals: Iterable[Principal],
    tokens: Iterable[TokenRecord],
    grants: Iterable[tuple[tuple[str, ...], frozenset[Scope]]],
    cap: Preset = Preset.COLLABORATE,
) -> GrantBook:
    """Rebuild the book from persisted records (daemon start)."""
    ps = {p.id: p for p in principals}
    aliases: dict[SessionKey, str] = {}
    for p in ps.values():
        if p.session is not None and p.merged_into is None:
            aliases[p.session] = p.id
    return GrantBook(
        principals=ps,
        tokens={t.token_hash: t for t in tokens},
        aliases=aliases,
        grants=dict(grants),
        cap=cap,
    )
