"""``connectd pair ...`` and ``connectd federate provision`` (docs/federation.md, "Pairing" and
"Subjects, stream, consumers, bucket").

The pair commands are clients of the running daemon's owner API (``/api/pairing/...``): the daemon
owns the store and the bus, and publishes what each decision owes the other box. Fingerprints are shown
wherever a person decides: ``pair invite`` prints this box's beside the code, ``pair accept`` shows the
inviter's and asks before it pins it, ``pair requests`` shows both boxes'. Every refusal is one line
naming the problem (and changes nothing: the daemon refused before it wrote).

``federate provision`` is the NATS operator's step, run with the operator's (admin) credentials: the
stream, the bucket and the box's consumer (idempotent), then the box's permission block for the server
configuration, printed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from connectcore.federation import pairing as P
from connectcore.federation.boxes import BoxError, check_box_id

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smh]?)")


def _duration(text: str) -> float:
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"a duration is a number of seconds, or like 15m or 2h, not {text!r}")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def _main() -> Any:
    from connectd.cli import main

    return main


def _confirm(args: argparse.Namespace, question: str) -> None:
    """Ask ``question`` unless ``--yes``; refuse without a terminal to ask on."""
    from connectd.cli.main import CliError

    if args.yes:
        return
    if not sys.stdin.isatty():
        raise CliError("no terminal to confirm on", "run it again with --yes once you have compared the fingerprint")
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise CliError("not confirmed: nothing changed")


# --- the commands --------------------------------------------------------------------------------


def cmd_invite(args: argparse.Namespace) -> int:
    m = _main()
    if args.revoke:
        done = m._client(args).call("POST", f"/api/pairing/invitations/{args.revoke}/revoke", {})
        m._print(args, done, [f"invitation {done['invitation']}: {done['state']} (its code no longer pairs)"])
        return 0
    result = m._client(args).call("POST", "/api/pairing/invitations", {"expires": args.expires})
    minutes = max(1, round((result["expires_at"] - time.time()) / 60))
    m._print(args, result, [
        f"invitation for box {result['name']} (id {result['box']}): one use, expires in {minutes} min ({_when(result['expires_at'])})",
        f"this box's fingerprint: {result['fingerprint']}",
        "",
        result["code"],
        "",
        "on the other box, run: connectd pair accept CODE   (the code travels by hand, never over NATS)",
    ])
    return 0


def cmd_accept(args: argparse.Namespace) -> int:
    from connectd.cli.main import CliError

    m = _main()
    try:
        code = P.decode_code(args.code)
    except P.PairingError as exc:
        raise CliError(str(exc)) from None
    client = m._client(args)
    print(f"box {code.name} (id {code.box}) invites this box to pair; its fingerprint:\n  {code.keys.fingerprint}",
          file=sys.stderr if args.json else sys.stdout)  # (--json: stdout is the answer alone)
    _confirm(args, "Is that the fingerprint `pair invite` printed on that box?")
    body: dict[str, Any] = {"code": args.code.strip()}
    if args.name:
        body["name"] = args.name
    result = client.call("POST", "/api/pairing/accept", body)
    said = "already accepted: the pairing it made" if result.get("repeat") else "accepted"
    m._print(args, result, [
        f"{said}: box {result['name']} ({result['box']}), fingerprint {result['fingerprint']}: {result['state']}",
        f"this box's fingerprint: {result['this_box']['fingerprint']} (the other box's owner compares it before approving)",
    ])
    return 0


def cmd_requests(args: argparse.Namespace) -> int:
    m = _main()
    rows = m._client(args).call("GET", "/api/pairing/requests" + ("?all=1" if args.all else ""))
    lines: list[str] = []
    for r in rows:
        lines += [
            f"{r['id']}  box {r['name']} ({r['box']}) asks to pair with this box: {r['state']}"
            + (f" ({r['reason']})" if r.get("reason") else ""),
            f"    its fingerprint:       {r['fingerprint']}",
            f"    this box's fingerprint: {r['this_box']['fingerprint']}",
        ]
        if r["state"] == "pending":
            lines.append(f"    connectd pair approve {r['box']} [--name NAME]   |   connectd pair decline {r['box']}")
    m._print(args, rows, lines)
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    m = _main()
    body = {"name": args.name} if args.name else {}
    result = m._client(args).call("POST", f"/api/pairing/requests/{args.box}/approve", body)
    m._print(args, result, [
        f"paired with box {result['name']} ({result['box']}), fingerprint {result['fingerprint']}: {result['state']}"
    ])
    return 0


def cmd_decline(args: argparse.Namespace) -> int:
    m = _main()
    result = m._client(args).call("POST", f"/api/pairing/requests/{args.box}/decline", {})
    m._print(args, result, [f"declined box {result['name']} ({result['box']}): the invitation is used up"])
    return 0


def heard_words(at: float | None) -> str:
    """When a box was last heard: ``-`` when it was not since the daemon started (kept in memory)."""
    if at is None:
        return "-"
    ago = max(0, round(time.time() - at))
    return f"{ago}s ago" if ago < 120 else f"{ago // 60}m ago" if ago < 7200 else _when(at)


def cmd_list(args: argparse.Namespace) -> int:
    m = _main()
    rows = m._client(args).call("GET", "/api/pairing/pairings")
    if args.json or not rows:
        m._print(args, rows, [])
        return 0
    m._table(
        ["NAME", "BOX", "FINGERPRINT", "STATE", "SINCE", "HEARD", "DIRECTORY", "IN FLIGHT", "PAIRING", "SETTINGS"],
        [[r["name"], r["box"], r["fingerprint"], r["state"] + (f" (by {r['removed_by']})" if r.get("removed_by") else ""),
          _when(r["since"]), heard_words(r.get("heard_at")), r.get("directory") or "none yet",
          in_flight_words(r.get("in_flight")), r.get("pairing") or "-", " ".join(r["settings_words"])]
         for r in rows],
    )
    return 0


def in_flight_words(counts: dict[str, int] | None) -> str:
    """``pair list``'s IN FLIGHT: messages sent to that box and received from it, not yet final here."""
    sent, received = (counts or {}).get("sent", 0), (counts or {}).get("received", 0)
    return f"{sent} sent, {received} received" if sent or received else "-"


def cmd_set(args: argparse.Namespace) -> int:
    m = _main()
    result = m._client(args).call("POST", f"/api/pairing/pairings/{args.box}/settings", {"set": args.settings})
    m._print(args, result, [f"box {result['name']} ({result['box']}): {' '.join(result['settings_words'])}"])
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    m = _main()
    client = m._client(args)
    counts = client.call("GET", f"/api/pairing/pairings/{args.box}").get("in_flight") or {}  # (unknown: refused here)
    sent, received = counts.get("sent", 0), counts.get("received", 0)
    cancels = (f" {sent} message(s) sent to it and {received} received from it, not yet final, are cancelled"
               " (one already being typed keeps going)." if sent or received else "")
    _confirm(args, f"Remove the pairing with {args.box} for good (pairing again needs a new invitation)?{cancels}")
    result = client.call("POST", f"/api/pairing/pairings/{args.box}/remove", {})
    m._print(args, result, [f"removed the pairing with box {result['name']} ({result['box']}) for good"])
    return 0


def cmd_provision(args: argparse.Namespace) -> int:
    """``federate provision BOX_ID --nats URL``: the operator's step, printing the permission block."""
    import anyio

    from connectd.cli.main import CliError

    try:
        box = check_box_id(args.box or "")
    except BoxError as exc:
        raise CliError(str(exc), "give the box id `federate init` printed on that box") from None
    if not args.nats:
        raise CliError("federate provision needs the server: --nats nats://HOST:PORT")
    password = None
    if args.password_file:
        try:
            password = Path(args.password_file).read_text().strip()
        except OSError as exc:
            raise CliError(f"cannot read the password file {args.password_file}: {exc.strerror}") from None

    async def provision() -> dict[str, Any]:
        import nats
        import nats.errors

        from connectd.federation.provision import permissions, provision_box, provision_stream

        async def quiet(_error: Exception) -> None:  # the refusal below says it, once, without a traceback
            return None

        try:
            nc = await nats.connect(args.nats, user=args.user, password=password, user_credentials=args.creds,
                                    connect_timeout=5, max_reconnect_attempts=0, allow_reconnect=False,
                                    error_cb=quiet)
        except (nats.errors.Error, OSError) as exc:
            raise CliError(f"cannot connect to {args.nats} as the operator: {exc or type(exc).__name__}") from None
        try:
            js = nc.jetstream()
            await provision_stream(js)
            await provision_box(js, box)
        except nats.errors.Error as exc:
            raise CliError(f"the server refused to provision box {box}: {exc}") from None
        finally:
            await nc.close()
        return permissions(box)

    block = anyio.run(provision)
    print(f"# the stream CONNECT, the bucket connect_dir and consumer box-{box} are in place on {args.nats}", file=sys.stderr)
    print(f"# give box {box}'s NATS user exactly these permissions:", file=sys.stderr)
    print(json.dumps({"user": f"box-{box}", "permissions": block}, indent=2))
    return 0


# --- registration ---------------------------------------------------------------------------------


def add_pair_commands(sub: Any, common: argparse.ArgumentParser, reads: argparse.ArgumentParser) -> None:
    """``connectd pair ...`` (one line in build_parser)."""
    pair = sub.add_parser("pair", parents=[common], help="pair this box with another (federation): invite, accept, approve, list, set, remove")
    actions = pair.add_subparsers(dest="pair_action", required=True)
    p = actions.add_parser("invite", parents=[common, reads], help="print a one-time invitation code for another box")
    p.add_argument("--expires", type=_duration, default=P.DEFAULT_EXPIRES, help="how long it lives (default 15m, at most 24h)")
    p.add_argument("--revoke", metavar="ID", help="withdraw the open invitation ID instead (its pending requests are refused)")
    p.set_defaults(func=cmd_invite)
    p = actions.add_parser("accept", parents=[common, reads], help="accept another box's invitation code (approval 1)")
    p.add_argument("code")
    p.add_argument("--name", help="this box's name for the inviter (default: the name in the code)")
    p.add_argument("--yes", action="store_true", help="do not ask: the fingerprint was compared")
    p.set_defaults(func=cmd_accept)
    p = actions.add_parser("requests", parents=[common, reads], help="pair requests waiting for you, with both fingerprints")
    p.add_argument("--all", action="store_true", help="also decided ones")
    p.set_defaults(func=cmd_requests)
    p = actions.add_parser("approve", parents=[common, reads], help="approve a pair request (approval 2)")
    p.add_argument("box", help="the requesting box: its id, its name or the request id")
    p.add_argument("--name", help="this box's name for it (needed when its own name is taken here)")
    p.set_defaults(func=cmd_approve)
    p = actions.add_parser("decline", parents=[common, reads], help="decline a pair request (the invitation is used up)")
    p.add_argument("box")
    p.set_defaults(func=cmd_decline)
    p = actions.add_parser("list", parents=[common, reads],
                           help="this box's pairings, with pinned fingerprints, when each was last heard, its "
                                "directory's age and its settings")
    p.set_defaults(func=cmd_list)
    p = actions.add_parser("set", parents=[common, reads], help="set a pairing's settings: KEY=VALUE ...")
    p.add_argument("box", help="its name or box id")
    p.add_argument("settings", nargs="+", metavar="KEY=VALUE",
                   help=f"{', '.join(P.SETTING_KEYS)} (messages=on|off; directory=reachable|connected|none;"
                        " history=none|index; history_repos=NAME,NAME (empty: none); the others whole numbers)")
    p.set_defaults(func=cmd_set)
    p = actions.add_parser("remove", parents=[common, reads], help="remove a pairing for good")
    p.add_argument("box", help="its name or box id")
    p.add_argument("--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_remove)


def add_provision_arguments(p: argparse.ArgumentParser) -> None:
    """``federate provision``'s arguments, on the ``federate`` command."""
    p.add_argument("box", nargs="?", help="provision: the box id to provision")
    p.add_argument("--nats", help="the NATS server, nats://HOST:PORT (without an action: this box's, into federation.toml)")
    p.add_argument("--creds", help="a credentials file (provision: the operator's; else this box's)")
    p.add_argument("--user", help="a NATS user, with --password-file (provision: the operator's; else this box's)")
    p.add_argument("--password-file", help="a file holding that user's password (only its path is kept)")
