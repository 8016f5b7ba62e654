"""The federation settings (``federation.toml``, a part of the pairing desk, :mod:`connectd.federation.desk`):
``name`` (``federate init``) and, to reach NATS, ``nats`` (the server URL) with ``creds`` (a credentials
file) or ``user`` and ``password_file``, and ``tls_ca``, ``tls_cert``, ``tls_key`` (``connectd federate
--nats URL ...`` writes them, ``--off`` clears them). Which change of them a running daemon takes without a restart is the core's
(:func:`connectcore.federation.connection.reload_refusal`, asked with :meth:`Settings.values`).
"""

from __future__ import annotations

import dataclasses
import ssl
import tomllib
from dataclasses import dataclass
from pathlib import Path

from connectcore.federation.connection import NATS_FIELDS
from connectd.federation import keys as K

__all__ = ["NATS_FIELDS", "RESEND", "Settings"]
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

    def values(self) -> dict[str, object]:
        """Every setting by its name: what the core's rules read."""
        return dataclasses.asdict(self)

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

