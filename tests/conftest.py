"""Fixtures every test may use: the real parts, defined once in tests/support/fixtures.py."""

from __future__ import annotations

from tests.support.fixtures import daemon, tmux

__all__ = ["daemon", "tmux"]
