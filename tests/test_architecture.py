"""The layered layout holds: no import cycle, no upward import, no module or function past its size limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_package_keeps_its_layers() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "architecture.py")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "import cycles: 0" in result.stdout and "upward imports: 0" in result.stdout


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "conductor_mcp"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "core" / "__init__.py").write_text("")
    (package / "service.py").write_text("X = 1\n")
    (package / "core" / "pool.py").write_text("from conductor_mcp.service import X\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "architecture.py"), str(package)], capture_output=True, text=True
    )
    assert result.returncode == 1 and "conductor_mcp.core.pool -> conductor_mcp.service" in result.stdout
