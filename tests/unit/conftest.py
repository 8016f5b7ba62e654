"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from tests.unit.hubkit import World


@pytest.fixture
def w() -> World:
    """A fresh hub driver (tests/unit/hubkit.py) at its start time."""
    return World()
