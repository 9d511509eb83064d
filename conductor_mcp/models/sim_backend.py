"""The simulator backend: `sim/<name>` models (sim.py), served as a litellm custom provider so they travel the
call path real models take (request building, retries, usage, cost). The router makes it, and registers the
provider with litellm, only when a pool calls a sim model; only here does a call carry the task's reference data."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.core.simulation import SimulationConfig
from conductor_mcp.models import sim
from conductor_mcp.models.backend import Call, Completion, request_for
from conductor_mcp.models.litellm_backend import LitellmBackend


class SimOverrides(Protocol):
    """The server's overrides of every sim pool (Settings.sim_time_scale, sim_call_log), read at each call."""

    sim_time_scale: float | None
    sim_call_log: Path | None


class SimBackend:
    def __init__(self, litellm_backend: LitellmBackend, overrides: SimOverrides) -> None:
        sim.register()
        self.litellm = litellm_backend
        self.overrides = overrides

    async def complete(self, spec: ModelSpec, call: Call) -> Completion:
        """Answer through litellm's `sim` provider, the task's reference data and the pool's profiles in the call's
        metadata (never sent to a real provider); sim models take no endpoint's concurrency limit."""
        request = request_for(spec, call)
        sim_call = sim.SimCall(
            reference=call.reference,
            simulation=call.simulation or SimulationConfig(),
            time_scale=self.overrides.sim_time_scale,
            call_log=self.overrides.sim_call_log,
        )
        request["metadata"] = {sim.SIM_CALL: sim_call}  # a fresh dict: litellm writes into the one it is given
        return await self.litellm.send(spec, call, request, remote=False)

    async def aclose(self) -> None:
        """Nothing to close: the simulator answers in this process."""
