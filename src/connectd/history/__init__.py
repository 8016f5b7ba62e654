"""Session history: the transcript index behind the ``history`` scope, ``connectd history`` and restore.

The daemon's MCP tools and owner API call :class:`HistoryService`; see docs/history.md.
"""

from connectd.history.index import HistoryIndex, IndexReport
from connectd.history.service import (
    ExpungeResult,
    HistoryService,
    SessionRunning,
    default_claude_root,
    default_codex_root,
    default_data_dir,
    jsonl_audit,
)

__all__ = [
    "ExpungeResult",
    "HistoryIndex",
    "HistoryService",
    "IndexReport",
    "SessionRunning",
    "default_claude_root",
    "default_codex_root",
    "default_data_dir",
    "jsonl_audit",
]
