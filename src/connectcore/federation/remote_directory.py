"""The directory across boxes: what this box publishes for one pairing, the entry's encoding with its
revision, how an arriving entry is judged, and each remote entry's age (docs/federation.md,
"Directory and history across boxes: reads").

Rules (D1 to D11):

- **D1 What a pairing sees.** The pairing's ``directory`` setting on the publishing box
  (:class:`Setting`): ``reachable`` (the default: the agents whose grant includes ``reachable``, the only
  ones a remote agent could message), ``connected`` (every connected agent) or ``none`` (nothing; the
  heartbeat still goes, empty). :func:`shared` picks them from this box's directory view.
- **D2 Only the shared fields, shaped.** An agent is shared with :data:`FIELDS` only (the pane, its
  address, harness, title, the repository's name (never its path), branch, PR links, activity, composer,
  scopes, release), never screen text, a working directory or an actor. Each text field is one line of
  printable characters, cut to its bound (:func:`shape`): what this box publishes passes D4 on the
  other box. At most :data:`MAX_AGENTS` agents and :data:`AGENTS_BUDGET` bytes of them are shared, so
  an entry always fits an envelope.
- **D3 The entry.** An entry is a ``directory`` envelope (:class:`connectcore.federation.envelope.DirectoryInner`:
  signed by the publisher, sealed to the reader, in the active pairing) with a ``revision`` higher than
  every earlier one for that key (:func:`next_revision`: the publisher's clock in milliseconds, and
  one more than the last when the clock has not moved on) and ``published_at``. It is put under
  ``<publisher>.<reader>`` on change (at most once a second) and every :data:`HEARTBEAT` seconds
  (:func:`due`), even when empty. The publisher sleeps until the earliest entry falls due
  (:func:`next_due`) or something changes (a change to the directory or the pairings wakes it).
- **D4 Judging an arriving entry** (:func:`receive`), the first that holds deciding, each refusal
  changing nothing: the envelope judgement's own refusals (``unpaired``, ``removed``, ``bad_signature``,
  ``bad_seal``, ``bad_binding``, ``clock_ahead``, ...: an unpaired or removed box's entry is refused
  there); ``not_an_entry`` (a verdict of another kind); ``malformed_entry`` (an agent whose fields are
  not exactly :data:`FIELDS`, shaped as D2 says: text from another machine is data, never markup);
  ``older_revision`` (a revision below the one held for that pairing: a replay). The same revision
  again is a ``repeat`` (nothing changes); anything else replaces what was held for that box.
- **D5 Age.** An entry's age counts from when this box heard it (``since``): when it arrived on the
  live updates, or, read by a direct get after a (re)connect, its ``published_at`` if that is earlier
  (a box that stopped publishing is not made fresh by being read again). ``fresh`` under
  :data:`STALE_AFTER` (180 s), then ``stale (N min)``; from :data:`AGED_OUT` (15 min) its agents leave
  the listing (the pairing stays). A pairing with no entry held shows ``none yet`` (:func:`age_words`,
  what ``pair list`` says of each pairing).
- **D6 Removed pairings.** Only an entry of a pairing active now is shown or kept: :func:`prune`
  drops the others (a removal, or a new pairing with the same box, drops what the old one said).
- **D7 Listing** (:func:`listing`): each remote agent with its box (the name this box approved it
  under, its id, the short fingerprint), its address qualified by that name (``%4@<token>@laptop``),
  the entry's age and whether it is stale.
- **D8 Ambiguity.** :func:`matches` counts, per paired box, the panes an unqualified handle names in
  that box's entry (the directory's own handle rules, :func:`connectcore.directory.candidates`), for
  :func:`connectcore.federation.boxes.place`: a handle naming panes on more than one box is refused
  ``ambiguous``, never guessed. A remote box's agent is never the ``control`` handle's.
- **D9 One remote agent** (:func:`detail`, ``get_agent`` with a target placed on a paired box): the
  one agent the target names in that box's entry (by the directory's own rules: an address by its pane
  and token, a handle by its matches), answered from the entry as :func:`listing` shows it (its box,
  age, staleness, whether it is reachable, the shared fields: never a working directory) with no screen
  (``screen_tail`` withheld: another box's screen is not shared) and no question; read only. Refused,
  as a local ``get_agent`` is: ``unknown_target`` (no such pane in the entry, or no entry held, or
  aged out), ``stale_incarnation`` (the pane now holds another process), ``no_pane``, ``ambiguous``
  (several panes on that box), ``no_pane`` for ``control`` (another box's control is not shared).
- **D10 The removal's tombstone.** A box whose owner removes a pairing puts, under that pairing's key,
  a **tombstone** (:func:`tombstone`): a ``directory`` envelope of the removed pairing, signed and
  sealed like an entry, flagged ``"tombstone": true``, with no agents; so the other box learns of the
  removal even if the signed ``unpair`` is lost, and one that was away reads it by direct get. Judged as
  an entry (D4: the envelope judgement first, so an unpaired box's, a forged one, one sealed for another
  box, or one naming a pairing that is not the active one, a replay after pairing again included, is
  refused and changes nothing), then :func:`receive`: one that carries agents is ``malformed_entry``
  (data only: it shows nothing); otherwise it is :attr:`Taken.REMOVED` whatever revision is held
  (removal is permanent and the pairing it names is signed, so no later entry of that pairing can
  exist), and the entry held from that box is dropped. The caller then records the removal as a
  received unpair does (:func:`connectcore.federation.pairing.removed_by_peer`).
- **D11 Catch-up.** A paired box whose entry is not held yet has its key read again by direct get
  every :data:`CATCH_UP` seconds (:func:`read_due`, :func:`next_read`), until an entry is held.

Pure: the shell seals, signs, opens and verifies; it hands :func:`receive` the envelope judgement's
verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from connectcore import directory as D
from connectcore._machine import ConnectError, freeze
from connectcore.federation import envelope as E

HEARTBEAT = 60.0  # seconds between puts of an unchanged entry
STALE_AFTER = 180.0  # an entry this old is shown stale
AGED_OUT = 15 * 60.0  # an entry this old is no longer shown
MIN_INTERVAL = 1.0  # at most one put a second per key
CATCH_UP = 5.0  # seconds between direct gets of a paired box whose entry is not held yet
AUDIT_EVENT = "federation.directory"


class Setting(StrEnum):
    """A pairing's ``directory`` setting on the publishing box (``connectd pair set BOX directory=...``)."""

    REACHABLE = "reachable"
    CONNECTED = "connected"
    NONE = "none"


DEFAULT_SETTING = Setting.REACHABLE

#: The text fields of a shared agent and their bounds (characters).
TEXT_FIELDS: Mapping[str, int] = {
    "pane": 11, "address": 28, "harness": 32, "title": 200, "repo": 100, "branch": 200, "activity": 32,
    "composer": 32, "release": 64,
}
#: Every field of a shared agent: the text fields, ``pr_links`` (at most 20 links of 300 characters)
#: and ``scopes`` (at most 16 words).
FIELDS = frozenset({*TEXT_FIELDS, "pr_links", "scopes"})
MAX_LINKS = 20
MAX_LINK = 300
MAX_SCOPES = 16
MAX_AGENTS = 200
#: The most canonical JSON the shared agents may take: sealed and base64url'd, the entry stays within
#: an envelope's 64 KiB (the agents past it are left out: the newest directory first is not promised).
AGENTS_BUDGET = 44 * 1024
_NULLABLE = frozenset({"title", "repo", "branch", "release"})


class EntryRefused(ConnectError):
    """An arriving entry this box does not take (D4); ``reason`` names the rule. Nothing changed."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# --------------------------------------------------------------------------------------------------
# D1, D2: what is published
# --------------------------------------------------------------------------------------------------


def _one_line(value: object, bound: int) -> str:
    """``value`` as one line of printable characters, at most ``bound`` long (D2)."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value))
    return text[:bound]


def _repo_name(repo: str) -> str:
    stripped = repo.rstrip("/")
    return stripped.rsplit("/", 1)[-1] if stripped else ""


def shape(agent: Mapping[str, Any]) -> dict[str, Any]:
    """One local agent's entry (as ``list_agents`` gives it) as it is shared: :data:`FIELDS` only, each
    text one printable line within its bound, the repository by its name (D2)."""
    shaped: dict[str, Any] = {}
    for name, bound in TEXT_FIELDS.items():
        value = agent.get(name)
        if name == "repo" and isinstance(value, str):
            value = _repo_name(value)
        if value is None or value == "":
            shaped[name] = None if name in _NULLABLE else ""
        else:
            shaped[name] = _one_line(value, bound)
    shaped["pr_links"] = [_one_line(link, MAX_LINK) for link in list(agent.get("pr_links") or ())[:MAX_LINKS]]
    shaped["scopes"] = [_one_line(s, 32) for s in list(agent.get("scopes") or ())[:MAX_SCOPES]]
    return shaped


def shared(agents: Sequence[Mapping[str, Any]], setting: Setting = DEFAULT_SETTING) -> tuple[dict[str, Any], ...]:
    """What a pairing with this ``setting`` sees of this box's directory view (D1), shaped (D2)."""
    if setting is Setting.NONE:
        return ()
    if setting is Setting.REACHABLE:
        picked = [a for a in agents if "reachable" in (a.get("scopes") or ())]
    else:
        picked = [a for a in agents if a.get("scopes")]
    kept: list[dict[str, Any]] = []
    size = 0
    for agent in picked[:MAX_AGENTS]:
        shaped = shape(agent)
        size += len(E.canonical(shaped)) + 1
        if size > AGENTS_BUDGET:
            break
        kept.append(shaped)
    return tuple(kept)


def next_revision(last: int, now: float) -> int:
    """The next entry's revision (D3): the clock in milliseconds, above ``last`` in any case."""
    return max(last + 1, int(now * 1000))


def entry(routing: E.Routing, agents: Sequence[Mapping[str, Any]], *, revision: int, now: float) -> E.DirectoryInner:
    """The entry to seal for ``routing`` (a ``directory`` kind from this box to the reader)."""
    if routing.kind is not E.Kind.DIRECTORY:
        raise ValueError(f"a directory entry travels as a directory envelope, not a {routing.kind}")
    return E.DirectoryInner(routing, revision, now, tuple(dict(a) for a in agents))


def tombstone(routing: E.Routing, *, revision: int, now: float) -> E.DirectoryInner:
    """The tombstone to seal for ``routing`` (a ``directory`` kind from this box to the reader, naming
    the pairing this box's owner removed) (D10): no agents, flagged."""
    if routing.kind is not E.Kind.DIRECTORY:
        raise ValueError(f"a tombstone travels as a directory envelope, not a {routing.kind}")
    return E.DirectoryInner(routing, revision, now, (), tombstone=True)


@dataclass(frozen=True)
class Published:
    """What this box last put for one reader: the agents (to see a change) and when."""

    agents: tuple[dict[str, Any], ...]
    at: float


def due(last: Published | None, agents: Sequence[Mapping[str, Any]], now: float) -> bool:
    """Whether the entry for a reader is to be put now (D3): never put, changed (at most once a
    second), or the heartbeat is due."""
    if last is None:
        return True
    if now - last.at >= HEARTBEAT:
        return True
    return tuple(agents) != last.agents and now - last.at >= MIN_INTERVAL


def next_due(last: Published | None, agents: Sequence[Mapping[str, Any]], now: float) -> float:
    """When the entry for a reader falls due (D3) if ``agents`` stay as they are: ``now`` when never
    put; a second after the last put when they changed; else the heartbeat after it. The earliest
    time :func:`due` holds: the publisher sleeps until the earliest of these, or until something
    changes (a change to the directory or the pairings wakes it at once)."""
    if last is None:
        return now
    if tuple(agents) != last.agents:
        return max(now, last.at + MIN_INTERVAL)
    return last.at + HEARTBEAT


def refused_again(now: float) -> float:
    """When a put the bus refused (a permission, a full subject) is tried again (D3): a second later,
    the interval between puts of one key."""
    return now + MIN_INTERVAL


def read_due(held: bool, asked: float | None, now: float) -> bool:
    """Whether a paired box's key is read again by direct get now (the catch-up): its entry is not
    held and it was not asked within :data:`CATCH_UP` seconds (``asked``: when last, None: never)."""
    return not held and (asked is None or now - asked >= CATCH_UP)


def next_read(held: bool, asked: float | None, now: float) -> float | None:
    """When :func:`read_due` next holds for that box: None while its entry is held (an entry
    arriving keeps it so; a new pairing wakes the publisher at once)."""
    if held:
        return None
    return now if asked is None else max(now, asked + CATCH_UP)


# --------------------------------------------------------------------------------------------------
# D4: an arriving entry
# --------------------------------------------------------------------------------------------------


def check_agent(agent: Mapping[str, Any]) -> None:
    """An arriving agent is exactly what :func:`shape` makes, or :class:`EntryRefused`
    (``malformed_entry``): printed fields from another machine are data, never markup (D4)."""

    def bad(what: str) -> EntryRefused:
        return EntryRefused("malformed_entry", f"a shared agent's {what}")

    if set(agent) != FIELDS:
        raise bad(f"fields are {sorted(agent)[:20]}, not {sorted(FIELDS)}")
    for name, bound in TEXT_FIELDS.items():
        value = agent[name]
        if value is None and name in _NULLABLE:
            continue
        if not isinstance(value, str) or len(value) > bound or not value.isprintable():
            raise bad(f"{name} is not one printable line of at most {bound} characters")
    try:
        D.PaneAddress(*str(agent["address"]).split("@", 1))
    except (D.TargetError, TypeError):
        raise bad(f"address {str(agent['address'])[:40]!r} is not %N@<token>") from None
    if agent["address"].split("@", 1)[0] != agent["pane"]:
        raise bad("address names another pane than its pane")
    for name, count, bound in (("pr_links", MAX_LINKS, MAX_LINK), ("scopes", MAX_SCOPES, 32)):
        values = agent[name]
        if not isinstance(values, list) or len(values) > count or not all(
            isinstance(v, str) and len(v) <= bound and v.isprintable() for v in values
        ):
            raise bad(f"{name} are not at most {count} printable lines of {bound} characters")


@dataclass(frozen=True)
class RemoteAgent:
    """One agent another box shares: its fields as that box sent them (checked, D4)."""

    fields: tuple[tuple[str, Any], ...]

    def get(self, name: str) -> Any:
        return dict(self.fields)[name]


@dataclass(frozen=True)
class Entry:
    """The newest entry held from one box: its pairing, revision, when it was published (its clock)
    and since when this box counts its age (D5), and its agents."""

    box: str
    pairing: str
    revision: int
    published_at: float
    since: float
    agents: tuple[RemoteAgent, ...]


@dataclass(frozen=True)
class RemoteDirectory:
    """The entries this box holds, by the publishing box's id."""

    entries: Mapping[str, Entry] = field(default_factory=dict)


class Taken(StrEnum):
    NEW = "new"  # held now (first, or a higher revision)
    REPEAT = "repeat"  # the revision held: nothing changes
    REMOVED = "removed"  # a tombstone (D10): the pairing it names was removed by its publisher


def receive(
    directory: RemoteDirectory, verdict: E.Verdict, *, now: float, live: bool
) -> tuple[RemoteDirectory, Taken]:
    """``directory`` with the entry ``verdict`` judged (D4), and whether it was new; or
    :class:`EntryRefused`, changing nothing. ``live``: heard on the updates (else read by a direct get).
    A tombstone (D10) is :attr:`Taken.REMOVED`, with the entry held from its box dropped."""
    if verdict.decision is E.Decision.REFUSED:
        raise EntryRefused(str(verdict.reason), verdict.detail)
    inner = verdict.inner
    if verdict.decision is not E.Decision.ENTRY or not isinstance(inner, E.DirectoryInner):
        raise EntryRefused("not_an_entry", f"a {verdict.decision} verdict is not a directory entry's")
    if len(inner.agents) > MAX_AGENTS:
        raise EntryRefused("malformed_entry", f"an entry shares at most {MAX_AGENTS} agents")
    box, pairing = inner.routing.sender, inner.routing.pairing
    assert pairing is not None  # a directory envelope names its pairing (the judgement checked it is active)
    if inner.tombstone:
        if inner.agents:
            raise EntryRefused("malformed_entry", f"a tombstone from box {box} carries agents: it shows nothing")
        kept = {held_box: e for held_box, e in directory.entries.items() if held_box != box}
        return replace(directory, entries=freeze(kept.items())), Taken.REMOVED
    for agent in inner.agents:
        check_agent(agent)
    held = directory.entries.get(box)
    if held is not None and held.pairing == pairing:
        if inner.revision < held.revision:
            raise EntryRefused("older_revision", f"revision {inner.revision} from box {box} is older than the "
                                                 f"one held ({held.revision}): a replay")
        if inner.revision == held.revision:
            return directory, Taken.REPEAT
    since = now if live else min(now, inner.published_at)
    agents = tuple(RemoteAgent(tuple(sorted(a.items()))) for a in inner.agents)
    new = Entry(box, pairing, inner.revision, inner.published_at, since, agents)
    return replace(directory, entries=freeze({**directory.entries, box: new}.items())), Taken.NEW


# --------------------------------------------------------------------------------------------------
# D5, D6: age and removal
# --------------------------------------------------------------------------------------------------


def age(held: Entry, now: float) -> float:
    return max(0.0, now - held.since)


def freshness(seconds: float) -> str:
    """``fresh``, ``stale (N min)`` or ``aged out`` (D5)."""
    if seconds < STALE_AFTER:
        return "fresh"
    if seconds < AGED_OUT:
        return f"stale ({int(seconds // 60)} min)"
    return "aged out"


NONE_YET = "none yet"


def entry_age(directory: RemoteDirectory, box: str, pairing: str | None, now: float) -> float | None:
    """The age of the entry held from ``box`` for its pairing ``pairing`` (D5), None when none is held
    for it (never heard since this daemon started, or the pairing is not the one held)."""
    held = directory.entries.get(box)
    if held is None or pairing is None or held.pairing != pairing:
        return None
    return age(held, now)


def age_words(seconds: float | None) -> str:
    """A pairing's directory age as ``pair list`` and the page say it: :func:`freshness`, or
    ``none yet`` (:data:`NONE_YET`) when no entry is held."""
    return NONE_YET if seconds is None else freshness(seconds)


def prune(directory: RemoteDirectory, active: Mapping[str, str]) -> RemoteDirectory:
    """Only the entries of a pairing active now (``active``: box id -> its active pairing id) (D6)."""
    kept = {box: e for box, e in directory.entries.items() if active.get(box) == e.pairing}
    if len(kept) == len(directory.entries):
        return directory
    return replace(directory, entries=freeze(kept.items()))


@dataclass(frozen=True)
class Peer:
    """An active pairing as the listing names it: the name this box approved it under, the box id,
    the pairing id and the short fingerprint."""

    name: str
    box: str
    pairing: str
    fingerprint: str


def _shown(directory: RemoteDirectory, peers: Sequence[Peer], now: float) -> list[tuple[Peer, Entry]]:
    found = []
    for peer in sorted(peers, key=lambda p: p.name):
        held = directory.entries.get(peer.box)
        if held is not None and held.pairing == peer.pairing and age(held, now) < AGED_OUT:
            found.append((peer, held))
    return found


def listing(directory: RemoteDirectory, peers: Sequence[Peer], now: float) -> tuple[dict[str, Any], ...]:
    """The remote agents ``list_agents`` shows (D7): from active pairings only (D6), not aged out (D5)."""
    shown: list[dict[str, Any]] = []
    for peer, held in _shown(directory, peers, now):
        seconds = age(held, now)
        for agent in held.agents:
            fields = dict(agent.fields)
            shown.append({
                **fields,
                "address": f"{fields['address']}@{peer.name}",
                "box": {"name": peer.name, "id": peer.box, "fingerprint": peer.fingerprint},
                "age": int(seconds),
                "freshness": freshness(seconds),
                "stale": seconds >= STALE_AFTER,
                "reachable": "reachable" in fields["scopes"],
                "remote": True,
            })
    return tuple(shown)


# --------------------------------------------------------------------------------------------------
# D8: ambiguity
# --------------------------------------------------------------------------------------------------


#: What :func:`detail` says in place of a remote agent's screen (D9).
SCREEN_WITHHELD = "the screen of an agent on another box is not shared: only its directory entry"


def detail(
    directory: RemoteDirectory, peers: Sequence[Peer], now: float, box_name: str, target: D.Target
) -> dict[str, Any]:
    """The one agent ``target`` names on the paired box ``box_name`` (D9), as ``get_agent`` answers it,
    or :class:`connectcore.directory.TargetError`. ``target`` is unqualified (the box's name taken off)."""
    if isinstance(target, D.Handle) and target.kind is D.HandleKind.CONTROL:
        raise D.TargetError(D.TargetRefusal.NO_PANE, f"box {box_name} does not share its control agent")
    shown = {peer.name: (peer, held) for peer, held in _shown(directory, peers, now)}
    if box_name not in shown:
        raise D.TargetError(D.TargetRefusal.UNKNOWN_TARGET,
                            f"box {box_name} shares no agent now (no directory entry from it, or it aged out)")
    peer, held = shown[box_name]
    records = {a.get("pane"): _record(a) for a in held.agents}
    try:
        record = D.resolve(D.Directory(panes=records), target)
    except D.TargetError as refused:
        raise D.TargetError(refused.reason, f"on box {box_name}: {refused}", candidates=refused.candidates) from None
    (entry,) = [e for e in listing(directory, [peer], now) if e["pane"] == record.pane_id]
    return {
        **entry,
        "question": None,
        "screen_tail": {"untrusted": True, "source": f"directory entry of box {box_name}", "text": "",
                        "shown": False, "withheld": SCREEN_WITHHELD},
    }


def _record(agent: RemoteAgent) -> D.PaneRecord:
    """A remote agent as a directory record, for the directory's handle rules only."""
    fields = dict(agent.fields)
    pane, token = str(fields["address"]).split("@", 1)
    return D.PaneRecord(
        incarnation=D.Incarnation(0, 0, pane, 0, 0), token=token, harness=fields["harness"], foreground="",
        title=fields["title"] or "", session_title="", cwd="", repo=fields["repo"], branch=fields["branch"],
        pr_links=tuple(fields["pr_links"]), binding=D.Unknown(D.Unbound.NO_EVIDENCE), launcher=None,
        is_control=False,
    )


def matches(directory: RemoteDirectory, peers: Sequence[Peer], now: float, target: D.Target) -> dict[str, int]:
    """How many panes the unqualified ``target`` names in each paired box's entry (D8), by box name;
    an address names none there (unqualified, it is this box's)."""
    if not isinstance(target, D.Handle) or target.kind is D.HandleKind.CONTROL:
        return {}
    counts: dict[str, int] = {}
    for peer, held in _shown(directory, peers, now):
        records = {a.get("pane"): _record(a) for a in held.agents}
        found = len(D.candidates(D.Directory(panes=records), target))
        if found:
            counts[peer.name] = found
    return counts
