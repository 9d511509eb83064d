"""The embedded-model backend: `local/<name>` models, answered by a llama.cpp server on loopback (local.py starts,
finds and diagnoses it) through the direct HTTP path. A call that fails on a server that died is told why, once,
instead of being retried against it. Nothing here imports litellm: the embedded model's calls are all direct, and
free unless the pool prices them."""

from __future__ import annotations

import asyncio

from conductor_mcp.core.pool import ConductorSpec, ModelSpec
from conductor_mcp.errors import LocalModelError
from conductor_mcp.models import local
from conductor_mcp.models.backend import Call, Completion, pool_rates, request_for
from conductor_mcp.models.openai_http import DirectBackend


class LocalBackend:
    """Local models on `servers`; the managed servers it started are stopped when it is closed (resident ones,
    started by `conductor-mcp local up`, stay)."""

    def __init__(self, servers: local.LocalServers, direct: DirectBackend) -> None:
        self.servers = servers
        self._direct = direct

    async def complete(self, spec: ModelSpec, call: Call) -> Completion:
        """Call the server that serves `spec`'s model (starting one if none runs) as the `hosted_vllm/` model it is;
        attempts and usage are recorded under the pool's name for it (litellm's price map knows no local model)."""
        name = spec.model.removeprefix(local.PREFIX)
        try:
            base_url, params = await self.servers.served(name, spec.params, conductor=isinstance(spec, ConductorSpec))
        except LocalModelError as exc:
            raise call.refused(spec, exc) from None
        served = spec.model_copy(update={"model": f"hosted_vllm/{name}", "api_base": base_url, "params": params})
        rates = pool_rates(spec) or (0.0, 0.0)
        request = request_for(served, call)
        return await self._direct.send(spec, call, request, diagnose=lambda: self.servers.death(name), rates=rates)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.servers.stop_managed)
