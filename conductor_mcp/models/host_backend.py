"""The host-sampling backend: `model: host` workers, answered by the model of the MCP client that asked for the run
(through `sampling/createMessage`; doors/mcp/sampling.py speaks the protocol)."""

from __future__ import annotations

import asyncio
import time

from conductor_mcp.core.host_model import HOST_MODEL, NO_HOST, HostModel
from conductor_mcp.core.pool import ModelSpec, WorkerSpec
from conductor_mcp.core.records import Attempt, now
from conductor_mcp.errors import HostDeclined, HostUnavailable, ProviderError
from conductor_mcp.models.backend import Call, Completion, failed, sanitized
from conductor_mcp.runtime.logs import redact_values


class HostBackend:
    """One run's host model (None where the run's session cannot sample): bound per run by `Providers.hosted`."""

    def __init__(self, host: HostModel | None) -> None:
        self.host = host

    async def complete(self, spec: ModelSpec, call: Call) -> Completion:
        """One sampling request under the worker's own deadline. Never retried (its user may have declined it): a
        failure goes straight to the worker's fallbacks. Usage is what the host reported."""
        started, sent_at = time.perf_counter(), now("microseconds")
        preferences = spec.preferences if isinstance(spec, WorkerSpec) else None
        try:
            if self.host is None:
                raise HostUnavailable(NO_HOST)
            async with asyncio.timeout(spec.timeout_s):
                answer = await self.host.create_message(call.messages, spec.params, preferences)
        except (HostUnavailable, HostDeclined, TimeoutError) as exc:
            call.attempts.append(failed(spec, call.label, exc, started, sent_at))
            raise ProviderError(f"{spec.model}: {call.attempts[-1].error}", call.attempts) from None
        latency = time.perf_counter() - started
        ok = Attempt(model=spec.model, worker=call.label, ok=True, latency_s=round(latency, 4), started_at=sent_at)
        call.attempts.append(ok)
        text, model = redact_values(sanitized(answer.text)), f"{HOST_MODEL}/{sanitized(answer.model)}"
        usage = (answer.prompt_tokens, answer.completion_tokens, 0.0)  # tokens as the host reported them; no cost
        return Completion(text, answer.stop_reason, *usage, latency, model, call.attempts)

    async def aclose(self) -> None:
        """Nothing to close: the session belongs to the door that serves it."""
