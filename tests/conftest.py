"""Test-wide settings."""

import pytest


@pytest.fixture(autouse=True)
def _fixed_console_width(monkeypatch):
    """Rich wraps to the terminal's width (COLUMNS), so output checks would pass or fail with the shell
    that runs pytest; every test sees the same 100 columns."""
    monkeypatch.setenv("COLUMNS", "100")
