"""The router loads a backend's dependencies only for the models that need them: warming the embedded model's
backend (a server on the local pool, after its host's handshake) leaves litellm unloaded."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conductor_mcp.config import Settings
from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.models.providers import Providers

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


def test_warming_a_sim_pool_leaves_litellm_unloaded(tmp_path: Path) -> None:
    """The simulator answers on its direct path; only the benchmarks' litellm provider (sim_litellm.py) needs it."""
    assert not _warm_loads_litellm(tmp_path, "sim/conductor", "sim/solver")


async def test_a_call_waits_for_the_imports_its_kind_needs_not_for_litellms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the warm-up imports litellm (held here until released), a sim model answers; a litellm model's call
    waits for the import and then answers."""
    from conductor_mcp.models import providers as router

    importing, release = threading.Event(), threading.Event()

    def held_import() -> None:
        importing.set()
        release.wait(timeout=60)

    monkeypatch.setattr(router, "_import_litellm", held_import)
    models = Providers(Settings.from_env(state_dir=tmp_path, sim_time_scale=0))
    warm = asyncio.create_task(models.warm(lambda: ["sim/solver", "openai/gpt-5"]))
    try:
        await asyncio.to_thread(importing.wait, 60)  # the backends' own modules are in; litellm's import is held
        hello = [{"role": "user", "content": "What is 6 * 7?"}]
        answered = await models.complete(ModelSpec(model="sim/solver"), hello)
        assert answered.attempts[-1].ok and not warm.done()
        mocked = ModelSpec(model="openai/gpt-5", params={"mock_response": "42"})
        through_litellm = asyncio.create_task(models.complete(mocked, hello))
        await asyncio.sleep(0)
        assert not through_litellm.done()
        release.set()
        await warm
        assert (await through_litellm).text == "42"
    finally:
        release.set()
        warm.cancel()
        await models.aclose()
