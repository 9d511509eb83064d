"""The simulator backend: `sim/<name>` models (sim.py), answered in this process on a direct path, so a sim call
costs the simulator's own work, not litellm's (its thread-pool hand-off, logging object and pydantic response
came to 2-4 ms of CPU per call, more than the simulator). The request is built as for any model and the call goes
through the same retry loop, attempts, usage and cost. The router makes this backend only when a pool calls a sim
model; only here does a call carry the task's reference data."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.core.simulation import SimulationConfig
from conductor_mcp.models import sim
from conductor_mcp.models.backend import Call, Completion, request_for
from conductor_mcp.models.retry import Retrier, priced


class SimOverrides(Protocol):
    """The server's overrides of every sim pool (Settings.sim_time_scale, sim_call_log), read at each call."""

    sim_time_scale: float | None
    sim_call_log: Path | None


class SimBackend:
    def __init__(self, retrier: Retrier, overrides: SimOverrides) -> None:
        self.retrier = retrier
        self.overrides = overrides

    async def complete(self, spec: ModelSpec, call: Call) -> Completion:
        """Answer from the simulator, the task's reference data and the pool's profiles beside the messages (never
        sent to a real provider); sim models take no endpoint's concurrency limit. Priced at the pool's price, as
        litellm priced them (it has none of its own for a sim model)."""
        request = request_for(spec, call)
        sim_call = sim.SimCall(
            reference=call.reference,
            simulation=call.simulation or SimulationConfig(),
            time_scale=self.overrides.sim_time_scale,
            call_log=self.overrides.sim_call_log,
        )
        name = spec.model.removeprefix(sim.PREFIX)  # as litellm hands it to its provider (the call log records it)

        async def answer(request: dict[str, Any]) -> Any:
            return sim.response(await sim.answer(name, call.messages, sim_call, request))

        rates = spec.price.per_token() if spec.price else (0.0, 0.0)
        return await self.retrier.send(spec, call, request, answer, priced(rates), remote=False)

    async def aclose(self) -> None:
        """Nothing to close: the simulator answers in this process."""
