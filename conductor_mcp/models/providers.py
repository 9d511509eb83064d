"""Model calls as this server makes them: one backend per kind of model, and fallbacks across them.

Workers, the conductor and simulated models all go through `Providers.complete`, which picks the backend that
serves each model (backend.py lists them) and, when one fails, the worker's fallbacks in turn. A backend's module
is imported, and the backend made, when a pool first calls a model it serves (or when the service warms the ones
its pools name, after the host's handshake), so nothing here loads litellm: `serve` answers `initialize` without it.
The Providers owns the backends it made and closes them with it (the service's lifespan closes the service's).
"""

from __future__ import annotations

import asyncio
import copy
import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from conductor_mcp.config import Settings
from conductor_mcp.core.host_model import HOST_MODEL, HostModel
from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.core.records import Attempt
from conductor_mcp.core.simulation import SimulationConfig
from conductor_mcp.errors import ProviderError
from conductor_mcp.models import local
from conductor_mcp.models.backend import Backend, Call, Completion, pool_rates
from conductor_mcp.models.retry import Retrier
from conductor_mcp.runtime.logs import get_logger

if TYPE_CHECKING:
    from conductor_mcp.models.litellm_backend import LitellmBackend
    from conductor_mcp.models.openai_http import DirectBackend

log = get_logger(__name__)

SIM_PREFIX, DIRECT_PREFIX = "sim/", "hosted_vllm/"  # sim.PREFIX and openai_http.PREFIX, without importing them
# The module of each backend's kind; importing it is what warming does.
MODULES = {
    "litellm": "conductor_mcp.models.litellm_backend",
    "direct": "conductor_mcp.models.openai_http",
    "local": "conductor_mcp.models.local_backend",
    "sim": "conductor_mcp.models.sim_backend",
}

# The kinds that may call through litellm: its own and the direct path (what it cannot send itself). The simulator
# and the embedded model answer without it.
THROUGH_LITELLM = frozenset({"litellm", "direct"})


def kind_of(model: str) -> str:
    """Which backend serves `model`: the host's model, the embedded one, the simulator, an OpenAI-compatible server
    (the direct path), or anything else litellm knows."""
    if model == HOST_MODEL:
        return "host"
    if local.is_local(model):
        return "local"
    if model.startswith(SIM_PREFIX):
        return "sim"
    return "direct" if model.startswith(DIRECT_PREFIX) else "litellm"


def price_per_token(spec: ModelSpec) -> tuple[float, float] | None:
    """USD per input and output token: the pool file's price, else litellm's price map, else None."""
    if rates := pool_rates(spec):
        return rates
    from conductor_mcp.models.litellm_backend import listed_price

    return listed_price(spec.model)


@dataclass
class _Backends:
    """The backends a Providers made, by kind, and the warm-up's imports while they are under way (the backends'
    own modules first, litellm after them): shared with the Providers' `hosted` copies."""

    retrier: Retrier  # the retry loop every backend sends through: one, so an endpoint's limit holds across them
    made: dict[str, Backend] = field(default_factory=dict)
    modules: asyncio.Future[None] | None = None
    litellm: asyncio.Future[None] | None = None
    warm_started: bool = False


class Providers:
    """Model calls as this server is configured to make them: its retry backoff, its endpoints' concurrency
    limits, its local model servers and its overrides of the simulator. The service makes one (on its event loop)
    and hands it to the conductor and the executor."""

    def __init__(self, settings: Settings, local_servers: local.LocalServers | None = None) -> None:
        self.retry_base_s = settings.retry_base_s
        self.sim_time_scale = settings.sim_time_scale
        self.sim_call_log = settings.sim_call_log
        # started on a local model's first call, or before it (`run` starts the pool's while it imports the engine)
        self.local = local_servers or local.LocalServers(settings.state_dir)
        self.host: HostModel | None = None  # answers `model: host` workers: see `hosted`
        self._backends = _Backends(Retrier(settings.retry_base_s))

    def hosted(self, host: HostModel | None) -> Providers:
        """These providers for one run whose `model: host` workers `host` answers (the MCP session that asked for
        it); the backends (their endpoints' limits, local servers, connections) stay shared."""
        if host is None:
            return self
        bound = copy.copy(self)
        bound.host = host
        return bound

    @property
    def warm_started(self) -> bool:
        return self._backends.warm_started

    async def warm(self, models: Callable[[], Iterable[str]], then: Callable[[], None] | None = None) -> None:
        """Import the modules of the backends that serve `models()` in a worker thread, then litellm where a kind
        may call through it (seconds of CPU), and make those backends, so the first call of each costs what later
        ones do; then call `then`. A call made meanwhile waits for the imports its kind needs, never for litellm's
        unless it goes through litellm, and never imports on the event loop. Once: a later call returns at once.
        The service runs this after a host's handshake (stdio) or before it listens (HTTP)."""
        backends = self._backends
        if backends.warm_started:
            return
        backends.warm_started = True
        try:
            kinds = sorted({kind_of(model) for model in models()} - {"host"})
            own = [kind for kind in kinds if kind != "litellm"]
            backends.modules = asyncio.ensure_future(asyncio.to_thread(_import_modules, own))
            if set(kinds) & THROUGH_LITELLM:
                backends.litellm = asyncio.get_running_loop().create_future()
            await backends.modules
            for kind in own:
                self._backend(kind)
            if backends.litellm is not None:
                await asyncio.to_thread(_import_litellm)
                if "litellm" in kinds:
                    self._backend("litellm")
            log.info("backends_warmed", kinds=kinds)
        finally:  # a failed import is met again by the call that needs it, with its error
            if backends.litellm is not None and not backends.litellm.done():
                backends.litellm.set_result(None)
            backends.modules = backends.litellm = None
            if then is not None:
                then()

    async def _imported(self, kind: str) -> None:
        """Wait for the warm-up's imports that a call of `kind` needs, if it is under way: litellm's for litellm,
        the backends' own modules for the others."""
        pending = self._backends.litellm if kind == "litellm" else None
        pending = pending or self._backends.modules
        if pending is not None:
            await asyncio.wait([pending])

    async def _litellm_backend(self) -> LitellmBackend:
        """litellm's backend for a call the direct path cannot make itself, once the warm-up has imported it."""
        await self._imported("litellm")
        return cast("LitellmBackend", self._backend("litellm"))

    def _backend(self, kind: str) -> Backend:
        """The backend of `kind`, made (and its module imported) the first time a model of that kind is called."""
        if kind == "host":
            from conductor_mcp.models.host_backend import HostBackend

            return HostBackend(self.host)  # bound to this run's session: never shared
        made = self._backends.made
        if kind not in made:
            made[kind] = self._made(kind)
        return made[kind]

    def _made(self, kind: str) -> Backend:
        if kind == "litellm":
            from conductor_mcp.models.litellm_backend import LitellmBackend

            return LitellmBackend(self._backends.retrier)
        if kind == "direct":  # litellm made only for a call the direct path cannot send itself
            from conductor_mcp.models.openai_http import DirectBackend

            return DirectBackend(self._backends.retrier, self._litellm_backend)
        if kind == "local":
            from conductor_mcp.models.local_backend import LocalBackend

            return LocalBackend(self.local, cast("DirectBackend", self._backend("direct")))
        from conductor_mcp.models.sim_backend import SimBackend

        return SimBackend(self._backends.retrier, self)

    async def aclose(self) -> None:
        """Close every backend this Providers made (connections, litellm's sessions, managed model servers): the
        direct path's session and the local servers first, litellm's last (they may route through it)."""
        made = self._backends.made
        for kind in sorted(made, key=lambda kind: kind == "litellm"):
            await made.pop(kind).aclose()
        await asyncio.to_thread(self.local.stop_managed)  # a prestarted server no call reached too

    async def complete(
        self,
        spec: ModelSpec,
        messages: list[dict[str, Any]],
        *,
        label: str | None = None,
        fallbacks: Sequence[tuple[str, ModelSpec]] = (),
        metadata: dict[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
        simulation: SimulationConfig | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        """Call `spec` (retrying transient faults), then each fallback in turn; raise ProviderError if all fail.

        `metadata` (the task's reference data) and `simulation` (the pool's sim profiles) reach sim models only;
        `tools` (the client's function tools) are offered to chat models, which may answer with calls of them.
        """
        attempts: list[Attempt] = []
        extra = {"response_format": response_format, "tools": tools or None}
        candidates: list[tuple[str | None, ModelSpec]] = [(label, spec), *fallbacks]
        for position, (name, candidate) in enumerate(candidates):
            call = Call(messages, name, attempts, metadata or {}, simulation, extra)
            kind = kind_of(candidate.model)
            await self._imported(kind)
            try:
                return await self._backend(kind).complete(candidate, call)
            except ProviderError as exc:
                if position + 1 < len(candidates):
                    log.warning(
                        "provider_fallback",
                        failed=candidate.model,
                        next=candidates[position + 1][1].model,
                        error=str(exc),
                    )
                    continue
                raise ProviderError(str(exc), attempts) from None
        raise AssertionError("unreachable")


def _import_modules(kinds: list[str]) -> None:
    for kind in kinds:
        importlib.import_module(MODULES[kind])


def _import_litellm() -> None:
    from conductor_mcp.models.litellm_backend import load_lazily_imported

    load_lazily_imported()
