"""The layered layout holds: no import cycle, no import its folder's rules forbid, no function past its size limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_package_keeps_its_layers() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "architecture.py")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rules = ("import cycles: 0", "imports upward: 0", "imports sideways: 0", "imports past the service: 0")
    for rule in (*rules, "imports behind the front: 0"):
        assert rule in result.stdout, result.stdout


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "conductor_mcp"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "core" / "__init__.py").write_text("")
    (package / "service").mkdir()
    (package / "service" / "__init__.py").write_text("")
    (package / "service" / "service.py").write_text("X = 1\n")
    (package / "core" / "pool.py").write_text("from conductor_mcp.service.service import X\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "architecture.py"), str(package)], capture_output=True, text=True
    )
    assert result.returncode == 1 and "conductor_mcp.core.pool -> conductor_mcp.service.service" in result.stdout


def _package(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A package of the given files (relative path -> source), checked by the tool."""
    package = tmp_path / "conductor_mcp"
    for relative, source in {"__init__.py": "", **files}.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent != package:
            (path.parent / "__init__.py").touch()
        path.write_text(source)
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "architecture.py"), str(package)], capture_output=True, text=True
    )


def test_a_door_importing_the_training_code_is_caught(tmp_path: Path) -> None:
    result = _package(
        tmp_path, {"learning/training.py": "X = 1\n", "doors/mcp/server.py": "from ...learning import training\n"}
    )
    assert result.returncode == 1 and "conductor_mcp.doors.mcp.server -> conductor_mcp.learning" in result.stdout


def test_core_reading_the_environment_or_doing_io_is_caught(tmp_path: Path) -> None:
    result = _package(
        tmp_path,
        {
            "config.py": "def environment_value(name):\n    return None\n",
            "core/pool.py": "from conductor_mcp.config import environment_value\n",
            "core/records.py": "import os\nKEY = os.environ.get('K')\n",
            "core/usage.py": "def load(p):\n    return open(p).read()\n",
        },
    )
    assert result.returncode == 1
    for found in (
        "conductor_mcp.core.pool imports conductor_mcp.config",
        "conductor_mcp.core.records imports os",
        "conductor_mcp.core.usage calls open()",
    ):
        assert found in result.stdout, result.stdout


def test_a_circle_through_an_annotation_only_import_is_caught(tmp_path: Path) -> None:
    result = _package(
        tmp_path,
        {
            "errors.py": "import typing\nif typing.TYPE_CHECKING:\n    from conductor_mcp.config import X\n",
            "config.py": "from conductor_mcp.errors import E\n",
        },
    )
    assert result.returncode == 1 and "conductor_mcp.config <-> conductor_mcp.errors" in result.stdout


def test_code_packed_past_the_formatter_is_caught(tmp_path: Path) -> None:
    result = _package(tmp_path, {"engine/run.py": "def f(): return [1,\n 2]  # fmt: skip\n"})
    assert (
        result.returncode == 1 and "formatter opt-outs (fmt: skip/off): 1\n  conductor_mcp.engine.run" in result.stdout
    )


def test_siblings_importing_each_other_are_caught(tmp_path: Path) -> None:
    result = _package(tmp_path, {"runs/store.py": "X = 1\n", "telemetry/metrics.py": "from ..runs.store import X\n"})
    assert result.returncode == 1
    assert "imports sideways: 1\n  conductor_mcp.telemetry.metrics -> conductor_mcp.runs.store" in result.stdout


def test_a_door_reaching_past_the_service_is_caught(tmp_path: Path) -> None:
    below = ("agents", "models", "runs", "engine", "telemetry")
    files = {f"{room}/x.py": "X = 1\n" for room in below}
    files["doors/patches.py"] = "".join(f"from conductor_mcp.{room}.x import X\n" for room in below)
    result = _package(tmp_path, files)
    assert result.returncode == 1 and "imports past the service: 5" in result.stdout, result.stdout
    for room in below:
        assert f"conductor_mcp.doors.patches -> conductor_mcp.{room}.x" in result.stdout


def test_a_door_holding_the_raw_service_is_caught(tmp_path: Path) -> None:
    """Doors reach runs through the service's front (every operation checked for the caller), never the service or
    reader themselves, not even for an annotation."""
    files = {"service/service.py": "X = 1\n", "service/reader.py": "X = 1\n", "service/access.py": "X = 1\n"}
    files["doors/mcp/server.py"] = (
        "from conductor_mcp.service.access import X\nfrom conductor_mcp.service.service import X\n"
    )
    files["doors/viewer/routes.py"] = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from conductor_mcp.service.reader import X\n"
    )
    result = _package(tmp_path, files)
    assert result.returncode == 1 and "imports behind the front: 2" in result.stdout, result.stdout
    assert "conductor_mcp.doors.mcp.server -> conductor_mcp.service.service" in result.stdout
    assert "conductor_mcp.doors.viewer.routes -> conductor_mcp.service.reader" in result.stdout


def test_the_cli_reaching_past_the_service_is_caught(tmp_path: Path) -> None:
    result = _package(tmp_path, {"models/local.py": "X = 1\n", "cli/commands.py": "from ..models import local\n"})
    assert result.returncode == 1 and "conductor_mcp.cli.commands -> conductor_mcp.models.local" in result.stdout


def test_a_module_at_the_package_root_is_caught(tmp_path: Path) -> None:
    result = _package(tmp_path, {"config.py": "X = 1\n", "errors.py": "", "hosts.py": "from .config import X\n"})
    assert result.returncode == 1 and "modules outside the layers: 1\n  conductor_mcp.hosts" in result.stdout
