"""``connectd federate --nats URL ...`` and ``connectd federate --off``: how this box reaches NATS, in
``federation.toml`` (docs/federation.md, "Where the code goes", Configuration).

``--nats`` writes the server URL and how to log in: ``--creds FILE`` (a credentials file) or ``--user U
--password-file F``, and for TLS ``--tls-ca``, ``--tls-cert`` and ``--tls-key`` (files). Only paths and
names go into the file, never a secret; each ``--nats`` replaces all of these settings (what it does
not give is cleared). ``--off`` clears those settings (the box keeps its name, keys
and pairings; the pairing desk stays, without the bus). Everything is checked before anything is
written, and a refusal (a URL that is not ``nats://``, ``tls://``, ``ws://`` or ``wss://`` with a host,
credentials in the URL, a file that is missing or not a regular file, TLS files that do not load, a box without ``federate
init``, options that do not go together) is one line naming the problem, with the file unchanged. The
file is replaced atomically (0600). The daemon reads it at start; a running daemon is asked to read it again (``POST /api/pairing/reload``):
its bus loops start on the server now named, move there from the one they ran on, or stop (``--off``:
no NATS, the daemon serves its own fleet); a daemon that cannot take it (another name, or started
before ``federate init``) is to be restarted, and the person is told so.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from connectd.federation import keys as K

NATS_KEYS = ("nats", "creds", "user", "password_file", "tls_ca", "tls_cert", "tls_key")
SCHEMES = ("nats", "tls", "ws", "wss")


def _error(problem: str, fix: str = "") -> SystemExit:
    from connectd.cli.main import CliError

    return CliError(problem, fix)


def check_url(url: str) -> str:
    """The server URL, or a refusal naming what is wrong with it."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise _error(f"--nats {url!r} is not a URL ({exc})", "give it as nats://HOST:PORT") from None
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise _error(f"--nats {url!r} is not a NATS server URL (scheme {'/'.join(SCHEMES)} and a host)",
                     "give it as nats://HOST:PORT (tls://HOST:PORT for TLS)")
    if parts.username or parts.password:
        raise _error(f"--nats {url!r} holds a user or password: secrets do not go into federation.toml",
                     "use --user U --password-file F, or --creds FILE")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise _error(f"--nats {url!r} has a path or query: a NATS URL is scheme://HOST:PORT")
    return f"{parts.scheme}://{parts.hostname if ':' not in parts.hostname else f'[{parts.hostname}]'}" + (
        f":{port}" if port is not None else "")


def check_file(option: str, value: str) -> str:
    """The file's absolute path, or a refusal: it must exist, be a regular file and be readable."""
    path = Path(value).expanduser()
    if not path.is_file():
        raise _error(f"{option} {value}: {'no such file' if not path.exists() else 'not a regular file'}")
    if not os.access(path, os.R_OK):
        raise _error(f"{option} {value}: not readable by you")
    return str(path.resolve())


def settings_from(args: argparse.Namespace) -> dict[str, str]:
    """The NATS settings ``args`` ask for, each checked (nothing is written here)."""
    out = {"nats": check_url(args.nats)}
    if args.creds and (args.user or args.password_file):
        raise _error("--creds and --user/--password-file do not go together", "give one way to log in")
    if bool(args.user) != bool(args.password_file):
        raise _error("--user and --password-file go together", "give both, or --creds FILE")
    if args.creds:
        out["creds"] = check_file("--creds", args.creds)
    if args.user:
        out["user"] = args.user
        out["password_file"] = check_file("--password-file", args.password_file)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise _error("--tls-cert and --tls-key go together")
    for key in ("tls_ca", "tls_cert", "tls_key"):
        if getattr(args, key):
            out[key] = check_file("--" + key.replace("_", "-"), getattr(args, key))
    if "tls_ca" in out or "tls_cert" in out:
        import ssl

        from connectd.federation.desk import Settings

        try:  # the daemon makes the same context at start: a bad file is refused here, not there
            Settings(name="check", tls_ca=out.get("tls_ca"), tls_cert=out.get("tls_cert"), tls_key=out.get("tls_key")).tls()
        except (ssl.SSLError, OSError) as exc:
            raise _error(f"the TLS files do not load: {exc}", "give a PEM CA file, and a PEM certificate with its key") from None
    return out


def _current(data_dir: Path) -> dict[str, Any]:
    """``federation.toml`` as it is, or a refusal when this box is not set up (or the file is bad)."""
    import tomllib

    from connectd.federation.desk import Settings

    path = data_dir / K.FEDERATION_FILE
    try:
        if Settings.read(data_dir) is None:
            raise _error(f"this box is not set up for federation ({path} does not exist)",
                         "run `connectd federate init --name NAME` first")
        return tomllib.loads(path.read_text())
    except K.BoxKeyError as exc:
        raise _error(str(exc), f"fix {path} by hand") from None


def _toml(row: dict[str, Any]) -> str:
    lines = []
    for key, value in row.items():
        text = json.dumps(value) if isinstance(value, str) else repr(value)  # a JSON string is a TOML basic string
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


def _replace(path: Path, text: str) -> None:
    """``text`` into ``path``, atomically (0600, fsynced, the directory too)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), K.KEY_FILE_MODE)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    K._sync_dir(path.parent)


def cmd_settings(args: argparse.Namespace) -> int:
    """``federate --nats URL ...`` or ``federate --off``."""
    from connectd.cli import doctor
    from connectd.cli.main import _print

    data_dir = Path(args.data_dir).expanduser()
    if not args.off and not args.nats:
        raise _error("federate needs what to do", "`federate init --name NAME`, `federate --nats URL ...`, `federate --off` or `federate provision BOX --nats URL`")
    if args.off and args.nats:
        raise _error("--off and --nats do not go together")
    given = None if args.off else settings_from(args)  # checked before the file is read or written
    row = _current(data_dir)
    kept = {k: v for k, v in row.items() if k not in NATS_KEYS}
    path = data_dir / K.FEDERATION_FILE
    if given is None and not any(k in row for k in NATS_KEYS):
        _print(args, {"nats": None, "changed": False}, [f"box {row['name']} does not reach NATS already: nothing changed"])
        return 0
    new = {**kept, **(given or {})}
    _replace(path, _toml(new))
    from connectd.federation.desk import Settings

    Settings.read(data_dir)  # what was written reads back
    running = doctor._daemon_info(data_dir)
    lines = [f"box {row['name']}: federates through {given['nats']}" + (
        f" (credentials file {given['creds']})" if "creds" in given else
        f" (user {given['user']}, password in {given['password_file']})" if "user" in given else "")
        if given else f"box {row['name']}: federation off (its keys, name and pairings stay; nothing goes to NATS)",
        f"written to {path}"]
    picked = _picked_up(data_dir) if running else None
    restart_needed = bool(running) and not (picked and picked.get("picked_up")) and (
        picked is None or bool(picked.get("restart_needed")))
    if picked and picked.get("picked_up") and not picked.get("nats"):
        lines.append(f"the running daemon (pid {running.get('pid')}) picked it up: its bus stopped; it serves its own "
                     "fleet with no NATS")
    elif picked and picked.get("picked_up"):
        moved = " (what the other boxes have not yet receipted is published again there)" if picked.get("change") == "move" else ""
        lines.append(f"the running daemon (pid {running.get('pid')}) picked it up: its bus connects to {picked['nats']} now"
                     f"{moved} (`connectd doctor` says when it is connected)")
    elif running and not restart_needed:
        lines.append(f"the running daemon (pid {running.get('pid')}) runs no bus: nothing to restart")
    elif running:
        why = f" ({picked['why']})" if picked and picked.get("why") else ""
        lines.append(f"the running daemon (pid {running.get('pid')}) needs a restart to use it{why}: "
                     "`systemctl --user restart connectd`, or stop it and `connectd serve` again")
    else:
        lines.append("the daemon reads it when it starts")
    _print(args, {"nats": given, "file": str(path), "restart_needed": restart_needed, "changed": True,
                  "picked_up": bool(picked and picked.get("picked_up"))}, lines)
    return 0


def _picked_up(data_dir: Path) -> dict[str, Any] | None:
    """Ask the running daemon to read ``federation.toml`` again (``POST /api/pairing/reload``): its
    answer, or None when it cannot say (not reachable, or it started before ``federate init``)."""
    from connectd.cli.main import Client

    try:
        answer = Client(data_dir, None).call("POST", "/api/pairing/reload", {})
    except SystemExit:
        return None
    return answer if isinstance(answer, dict) else None


def add_settings_arguments(p: argparse.ArgumentParser) -> None:
    """``federate --off`` and the TLS files (``--nats``, ``--creds``, ``--user`` and ``--password-file``
    are shared with ``provision``)."""
    p.add_argument("--off", action="store_true", help="stop reaching NATS (keys, name and pairings stay)")
    p.add_argument("--tls-ca", help="a CA file to verify the NATS server with")
    p.add_argument("--tls-cert", help="a client certificate file for the NATS server (with --tls-key)")
    p.add_argument("--tls-key", help="the client certificate's key file")
