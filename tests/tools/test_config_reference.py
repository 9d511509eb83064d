"""The settings reference in the docs is generated from Settings, and a stale page is caught."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
TOOL = ROOT / "tools" / "config_reference.py"


def check(page: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), "--check", "--out", str(page)], capture_output=True, text=True, timeout=60
    )


def test_the_committed_reference_matches_the_settings() -> None:
    result = check(ROOT / "docs" / "configuration" / "reference.md")
    assert result.returncode == 0, result.stderr


def test_a_stale_reference_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "reference.md"
    current = (ROOT / "docs" / "configuration" / "reference.md").read_text()
    page.write_text(
        current.replace("| `CONDUCTOR_MAX_AGENTS` | `int` | `4` |", "| `CONDUCTOR_MAX_AGENTS` | `int` | `8` |")
    )
    assert page.read_text() != current  # the edit took: the page now disagrees with Settings
    result = check(page)
    assert result.returncode == 1 and "run python tools/config_reference.py" in result.stderr


def test_every_setting_has_a_row_with_its_variable_and_bounds() -> None:
    page = (ROOT / "docs" / "configuration" / "reference.md").read_text()
    assert "| `step_timeout_s` | `CONDUCTOR_STEP_TIMEOUT_S` | `float` | `600` | > 0 |" in page
    assert "| `otlp_endpoint` | `OTEL_EXPORTER_OTLP_ENDPOINT` |" in page  # an alias names the variable
    assert "| `metrics_port` | `CONDUCTOR_METRICS_PORT` | `int` | unset | >= 0, <= 65535 |" in page
