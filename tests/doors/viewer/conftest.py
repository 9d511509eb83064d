"""Fixtures the door tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from conductor_mcp.config import Settings
from conductor_mcp.service.service import Service
from tests.conftest import sim_pool_doc, write_pool


@pytest.fixture
async def viewer_service(tmp_path: Path, pool_dir: Path) -> AsyncIterator[Service]:
    write_pool(pool_dir, sim_pool_doc())
    async with Service.open(Settings.from_env(state_dir=tmp_path / "state").with_pool_dirs_first(pool_dir)) as service:
        yield service
