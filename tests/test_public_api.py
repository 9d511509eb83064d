"""The package's public API: the names `__all__` promises resolve, and importing the package imports none of them."""

from __future__ import annotations

import subprocess
import sys

import conductor_mcp


def test_every_public_name_resolves() -> None:
    for name in conductor_mcp.__all__:
        assert getattr(conductor_mcp, name).__name__ == name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        conductor_mcp.Nonexistent  # noqa: B018
    except AttributeError as exc:
        assert "Nonexistent" in str(exc)
    else:
        raise AssertionError("conductor_mcp.Nonexistent resolved")


def test_importing_the_package_loads_nothing_behind_the_api() -> None:
    probe = "import sys, conductor_mcp; print(sorted(m for m in sys.modules if m.startswith('conductor_mcp.')))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
