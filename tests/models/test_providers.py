"""The router loads a backend's dependencies only for the models that need them: warming the embedded model's
backend (a server on the local pool, after its host's handshake) leaves litellm unloaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

WARM = """
import asyncio, sys
from pathlib import Path
from conductor_mcp.config import Settings
from conductor_mcp.models.providers import Providers

async def main(models):
    providers = Providers(Settings.from_env(state_dir=Path(sys.argv[1])))
    await providers.warm(lambda: models)
    await providers.aclose()

asyncio.run(main(sys.argv[2:]))
print(sorted(name for name in sys.modules if name.split(".")[0] in ("litellm", "openai")) != [])
"""


def _warm_loads_litellm(tmp_path: Path, *models: str) -> bool:
    result = subprocess.run(
        [sys.executable, "-c", WARM, str(tmp_path), *models], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip() == "True"


def test_warming_the_embedded_models_backend_leaves_litellm_unloaded(tmp_path: Path) -> None:
    assert not _warm_loads_litellm(tmp_path, "local/gemma3-270m")
    assert _warm_loads_litellm(tmp_path, "local/gemma3-270m", "openai/gpt-5")  # a pool that needs it gets it warm
