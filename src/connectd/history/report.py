"""What one update of the history index did (:class:`IndexReport`).

Files seen, read, resumed and gone, entries written and removed, every skipped line or file with its
reason, and the sessions that changed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from connectd.history.parsers import Skip
from connectd.history.schema import Key


@dataclass
class IndexReport:
    """What one update did. ``skips`` lists every skipped line or file with its reason."""

    files_seen: int = 0
    files_read: int = 0
    files_resumed: int = 0
    files_missing: int = 0
    bytes_read: int = 0
    entries_written: int = 0
    entries_removed: int = 0
    skips: list[Skip] = field(default_factory=list)
    seconds: float = 0.0
    changed: set[Key] = field(default_factory=set)  # sessions whose entry was written or removed

    def skip_counts(self) -> dict[str, int]:
        return dict(Counter(s.reason for s in self.skips))

    def as_dict(self) -> dict[str, Any]:
        return {
            "files_seen": self.files_seen,
            "files_read": self.files_read,
            "files_resumed": self.files_resumed,
            "files_missing": self.files_missing,
            "bytes_read": self.bytes_read,
            "entries_written": self.entries_written,
            "entries_removed": self.entries_removed,
            "skipped": self.skip_counts(),
            "seconds": round(self.seconds, 3),
        }
