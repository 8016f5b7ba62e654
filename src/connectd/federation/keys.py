"""``box.key``: this box's two secret keys, created once (0600, durably) and read; never rewritten;
and ``federate init``, which makes them and writes the box's name into ``federation.toml``.

The file (docs/federation.md, "Box identity") is canonical JSON of two independent 32-byte secrets:
``{"seal_secret": "<base64url>", "sign_seed": "<base64url>", "v": 1}``: the Ed25519 signing seed and
the X25519 secret key (``connectd.federation.seal`` makes the PyNaCl keys from them; this module
needs no cryptography beyond the operating system's random bytes). It is created as the owner token
is: written and fsynced under a temporary name (0600, never following a symlink), linked to its name
(which fails if the file exists: keys are never replaced, since new keys are a new box), the temporary
name removed, the directory fsynced. A file that is missing, not a regular file, or garbled is a loud
:class:`BoxKeyError` naming the problem; a file readable by others is tightened to 0600 with a warning.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("connectd.federation")

BOX_KEY_FILE = "box.key"
FEDERATION_FILE = "federation.toml"
KEY_FILE_MODE = 0o600
SECRET_BYTES = 32
VERSION = 1


class BoxKeyError(Exception):
    """``box.key`` cannot be made or used; the message names the file and the problem."""


@dataclass(frozen=True, repr=False)
class BoxSecrets:
    """The two secrets in ``box.key`` (``repr`` hides them)."""

    sign_seed: bytes
    seal_secret: bytes

    def __post_init__(self) -> None:
        for name in ("sign_seed", "seal_secret"):
            value = getattr(self, name)
            if not isinstance(value, bytes) or len(value) != SECRET_BYTES:
                raise BoxKeyError(f"{name} is {SECRET_BYTES} bytes")

    def __repr__(self) -> str:
        return "BoxSecrets(<hidden>)"

    def encode(self) -> bytes:
        row = {"v": VERSION, "sign_seed": _b64(self.sign_seed), "seal_secret": _b64(self.seal_secret)}
        return json.dumps(row, sort_keys=True, separators=(",", ":")).encode("ascii") + b"\n"

    @classmethod
    def decode(cls, data: bytes, path: Path) -> BoxSecrets:
        try:
            row = json.loads(data)
        except ValueError as exc:
            raise BoxKeyError(f"{path} is not JSON ({exc}): restore it from a backup") from None
        if not isinstance(row, dict) or row.get("v") != VERSION or set(row) != {"v", "sign_seed", "seal_secret"}:
            raise BoxKeyError(f"{path} is not a version {VERSION} box key (fields v, sign_seed, seal_secret)")
        try:
            return cls(_unb64(row["sign_seed"]), _unb64(row["seal_secret"]))
        except (BoxKeyError, ValueError, TypeError, binascii.Error) as exc:
            raise BoxKeyError(f"{path} holds a malformed key ({exc})") from None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: object) -> bytes:
    if not isinstance(text, str):
        raise TypeError("a key is a base64url string")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def create(data_dir: Path) -> BoxSecrets:
    """New secrets in ``data_dir/box.key``, durably; :class:`BoxKeyError` if the file exists (this
    box has keys: new ones would be a new box, and its peers would have to pair again)."""
    path = data_dir / BOX_KEY_FILE
    if path.exists() or path.is_symlink():
        raise BoxKeyError(f"{path} exists: this box has its keys, and they are never replaced")
    made = BoxSecrets(secrets.token_bytes(SECRET_BYTES), secrets.token_bytes(SECRET_BYTES))
    _create_durably(path, made.encode(), "its keys are kept")
    return made


def init(data_dir: Path, name: str) -> BoxSecrets:
    """``connectd federate init --name NAME``: this box's keys (made now if ``box.key`` is missing,
    else the ones it has: never replaced) and ``federation.toml`` naming the box. The name is checked
    first (:func:`connectcore.federation.boxes.check_box_name`); a ``federation.toml`` that exists
    is refused: this box is set up already."""
    from connectcore.federation.boxes import check_box_name

    check_box_name(name)
    config = data_dir / FEDERATION_FILE
    if config.exists() or config.is_symlink():
        raise BoxKeyError(f"{config} exists: this box is set up for federation already")
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    have = (data_dir / BOX_KEY_FILE).exists() or (data_dir / BOX_KEY_FILE).is_symlink()
    made = read(data_dir) if have else create(data_dir)
    _create_durably(config, f'name = "{name}"\n'.encode("ascii"), "it is kept")
    return made


def _create_durably(path: Path, data: bytes, kept: str) -> None:
    """``data`` in a new 0600 file ``path``: written and fsynced under a temporary name, linked (never
    replacing a file made meanwhile), the directory fsynced."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), KEY_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # never replaces: a file made meanwhile wins, and we refuse
        except FileExistsError:
            raise BoxKeyError(f"{path} was created meanwhile by another process: {kept}") from None
    finally:
        tmp.unlink(missing_ok=True)
    _sync_dir(path.parent)


def read(data_dir: Path) -> BoxSecrets:
    """The secrets in ``data_dir/box.key``, or :class:`BoxKeyError` naming what is wrong."""
    path = data_dir / BOX_KEY_FILE
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise BoxKeyError(f"{path} does not exist: run `connectd federate init --name NAME` first") from None
    except OSError as exc:  # ELOOP: a symlink
        raise BoxKeyError(f"{path} cannot be opened ({exc.strerror}); it must be a regular file") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BoxKeyError(f"{path} is not a regular file")
        if info.st_mode & 0o077:
            log.warning("%s was readable by others (mode %o): tightening it to 0600", path, info.st_mode & 0o777)
            os.fchmod(f.fileno(), KEY_FILE_MODE)
        data = f.read(4096)
    return BoxSecrets.decode(data, path)


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
