"""Shared fixtures: an isolated state directory, instant simulated workers, and small pool files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from conductor_mcp.config import Settings
from conductor_mcp.service import Service


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDUCTOR_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONDUCTOR_SIM_TIME_SCALE", "0")
    monkeypatch.setenv("CONDUCTOR_POOL", "sim")  # tests that need the automatic choice unset it
    monkeypatch.delenv("CONDUCTOR_POOL_PATH", raising=False)


def sim_pool_doc(**overrides: Any) -> dict[str, Any]:
    """A small simulated pool; tests override what they need."""
    doc: dict[str, Any] = {
        "name": "testpool",
        "anonymize": True,
        "max_steps": 5,
        "conductor": {"model": "sim/conductor", "structured_output": "json_schema"},
        "workers": [
            {
                "id": "alpha",
                "model": "sim/alpha",
                "description": "strongest at math",
                "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
            },
            {
                "id": "beta",
                "model": "sim/beta",
                "description": "strongest at code",
                "price": {"input_per_mtok": 3.0, "output_per_mtok": 4.0},
            },
            {
                "id": "gamma",
                "model": "sim/gamma",
                "description": "generalist",
                "price": {"input_per_mtok": 0.5, "output_per_mtok": 0.5},
            },
        ],
        "simulation": {
            "conductors": {"conductor": {"malformed_rate": 0.0}},
            "workers": {
                "alpha": {"skills": {"math": 0.9}, "output_tokens": 50},
                "beta": {"skills": {"code": 0.9}, "output_tokens": 60},
                "gamma": {"default_skill": 0.5, "output_tokens": 40},
            },
        },
    }
    doc.update(overrides)
    return doc


@pytest.fixture
def pool_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "pools"
    directory.mkdir()
    return directory


def write_pool(directory: Path, doc: dict[str, Any]) -> Path:
    path = directory / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.fixture
def service(tmp_path: Path, pool_dir: Path) -> Service:
    write_pool(pool_dir, sim_pool_doc())
    settings = Settings.from_env(state_dir=tmp_path / "state")
    settings = Settings(state_dir=settings.state_dir, pool_dirs=(pool_dir, *settings.pool_dirs))
    return Service(settings)
