"""The federation settings (``federation.toml``, a part of the pairing desk, :mod:`connectd.federation.desk`):
``name`` (``federate init``) and, to reach NATS, ``nats`` (the server URL) with ``creds`` (a credentials
file) or ``user`` and ``password_file``, and ``tls_ca``, ``tls_cert``, ``tls_key`` (``connectd federate
--nats URL ...`` writes them, ``--off`` clears them); and which change a running daemon takes without a
restart (:func:`reload_refusal`).
"""

from __future__ import annotations

import dataclasses
import ssl
import tomllib
from dataclasses import dataclass
from pathlib import Path

from connectd.federation import keys as K

#: The settings of how this box reaches NATS (what ``federate --nats``/``--off`` write).
NATS_FIELDS = ("nats", "creds", "user", "password_file", "tls_ca", "tls_cert", "tls_key")
RESEND = 10.0  # seconds between copies of a pair_request while it waits for its answer


@dataclass(frozen=True)
class Settings:
    """``federation.toml``: this box's name, and how it reaches NATS (``nats`` None: it does not)."""

    name: str
    nats: str | None = None
    creds: str | None = None
    user: str | None = None
    password_file: str | None = None
    resend: float = RESEND
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @classmethod
    def read(cls, data_dir: Path) -> Settings | None:
        """The settings, or None when this box is not set up for federation (no ``federation.toml``)."""
        path = data_dir / K.FEDERATION_FILE
        if not path.exists():
            return None
        try:
            row = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise K.BoxKeyError(f"{path} cannot be read ({exc})") from None
        known = {"name", "nats", "creds", "user", "password_file", "resend", "tls_ca", "tls_cert", "tls_key"}
        unknown = sorted(set(row) - known)
        if unknown or not isinstance(row.get("name"), str):
            raise K.BoxKeyError(f"{path}: needs name = \"...\" and takes only {sorted(known)} (unknown: {unknown})")
        return cls(
            name=row["name"], nats=row.get("nats"), creds=row.get("creds"), user=row.get("user"),
            password_file=row.get("password_file"), resend=float(row.get("resend", RESEND)),
            tls_ca=row.get("tls_ca"), tls_cert=row.get("tls_cert"), tls_key=row.get("tls_key"),
        )

    def password(self) -> str | None:
        return None if self.password_file is None else Path(self.password_file).read_text().strip()

    def tls(self) -> ssl.SSLContext | None:
        """The TLS context ``tls_ca`` / ``tls_cert`` and ``tls_key`` ask for (None: the URL's scheme decides)."""
        if not (self.tls_ca or self.tls_cert):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context


def reload_refusal(current: Settings, read: Settings | None, *, bus_running: bool) -> tuple[str, bool] | None:
    """Why a running daemon does not take ``read`` (the file read again) in place of ``current``, and whether
    a restart is needed then; None when it does. The one change taken without a restart is the safe one:
    a daemon whose bus loops never started (``bus_running`` false) starts them when the file now names a
    NATS server and nothing else changed."""
    if read is None:
        return "federation.toml is gone", True
    if dataclasses.replace(read, **{k: getattr(current, k) for k in NATS_FIELDS}) != current:
        return "more than how this box reaches NATS changed (its name, resend): a restart reads it", True
    if bus_running:
        return (f"the running daemon's bus uses {current.nats}: "
                + ("moving it to another server" if read.nats else "turning federation off")
                + " needs a restart"), True
    if not read.nats:
        return "no NATS server named: no bus to start", False
    return None
