"""The optional policy file (``policy.toml`` in the data directory): a cap on the preset a person may
grant, and the delivery limits. A malformed file is refused with its line and the reason.

```toml
cap = "observe"          # off | observe | collaborate (default collaborate)

[limits]                 # any field of connectcore.delivery.Limits
hop_limit = 4
sender_per_window = 30

[federation]             # a federated box's bounds (connectcore.federation.policy, rules S1-S4)
accepted_poll = 120
```
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path

from connectcore.delivery import DEFAULT_LIMITS, Limits
from connectcore.federation import policy as F
from connectcore.grants import Preset


class PolicyError(Exception):
    pass


@dataclass(frozen=True)
class Policy:
    cap: Preset = Preset.COLLABORATE
    limits: Limits = DEFAULT_LIMITS
    federation: F.FederationPolicy = F.DEFAULT


def _line_of(text: str, key: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith(key):
            return number
    return 0


def parse_policy(text: str, source: str = "policy.toml") -> Policy:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{source}: {exc}") from exc
    unknown = set(data) - {"cap", "limits", "federation"}
    if unknown:
        key = sorted(unknown)[0]
        raise PolicyError(
            f"{source}:{_line_of(text, key)}: unknown setting {key!r} (known: cap, [limits], [federation])"
        )
    cap = Preset.COLLABORATE
    if "cap" in data:
        try:
            cap = Preset(data["cap"])
        except ValueError:
            raise PolicyError(
                f"{source}:{_line_of(text, 'cap')}: cap must be off, observe or collaborate, not {data['cap']!r}"
            ) from None
    limits = DEFAULT_LIMITS
    raw = data.get("limits", {})
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}:{_line_of(text, 'limits')}: limits must be a table")
    fields = {f.name: f for f in dataclasses.fields(Limits)}
    values: dict[str, float | int] = {}
    for key, value in raw.items():
        line = _line_of(text, key)
        if key not in fields:
            raise PolicyError(f"{source}:{line}: unknown limit {key!r} (known: {', '.join(sorted(fields))})")
        default = getattr(DEFAULT_LIMITS, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PolicyError(f"{source}:{line}: {key} must be a number, not {value!r}")
        if isinstance(default, int) and not isinstance(value, int):
            raise PolicyError(f"{source}:{line}: {key} must be a whole number, not {value!r}")
        if value <= 0:
            raise PolicyError(f"{source}:{line}: {key} must be positive, not {value!r}")
        values[key] = value
    if values:
        limits = dataclasses.replace(DEFAULT_LIMITS, **values)  # type: ignore[arg-type]
    table = data.get("federation", {})
    if not isinstance(table, dict):
        raise PolicyError(f"{source}:{_line_of(text, 'federation')}: federation must be a table")
    try:
        federation = F.parse(table)
    except F.PolicyRefused as exc:
        raise PolicyError(f"{source}:{_line_of(text, exc.key)}: {exc}") from None
    return Policy(cap=cap, limits=limits, federation=federation)


def load_policy(path: Path) -> Policy:
    if not path.exists():
        return Policy()
    return parse_policy(path.read_text(), str(path))
