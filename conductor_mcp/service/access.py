"""One principal's view of the runs: the single place where who may see, continue and cancel a run is decided.

A door never holds the service itself: it holds a `Front` (a `ReadFront` for the read-only viewer), which offers
what is the same for every caller (settings, the pool catalogue, metrics, warm-up) and, for a request's principal
(core/principal.py), `Reads` or `Access`: the run operations, each checked. A run recorded as another
principal's is RunNotFound, exactly as a run that does not exist (a door answers 404, never 403, so run ids tell
nothing), lists hold the principal's own runs, and the runs it starts are recorded as its. An admin sees and acts
on every run. The service's own run operations check nobody, and no door can reach them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from conductor_mcp.config import Settings
from conductor_mcp.core.events import ProgressCallback
from conductor_mcp.core.host_model import HostModel
from conductor_mcp.core.pool import Pool
from conductor_mcp.core.principal import Principal
from conductor_mcp.core.records import Run
from conductor_mcp.core.request import RunRequest
from conductor_mcp.core.usage import CostEstimate
from conductor_mcp.errors import RunNotFound
from conductor_mcp.service.catalogue import PoolCatalog
from conductor_mcp.service.reader import RunReader
from conductor_mcp.service.service import Service
from conductor_mcp.telemetry.observer import Telemetry

P = ParamSpec("P")
R = TypeVar("R")


def _checked(operation: Callable[Concatenate[Any, str, P], R]) -> Callable[Concatenate[Reads, str, P], R]:
    """The reader's (or service's) own `operation`, which takes a run id first, for the runs this principal may
    see: RunNotFound, before anything is done, for any other. One signature, the operation's, for both."""
    name = operation.__name__

    @functools.wraps(operation)
    def checked(self: Reads, run_id: str, *args: P.args, **kwargs: P.kwargs) -> R:
        self.get_run(run_id)
        return getattr(self.reader, name)(run_id, *args, **kwargs)  # the instance's: Service overrides follow

    return checked


class Reads:
    """What a principal may read: its own runs (an admin's: every run)."""

    def __init__(self, reader: RunReader, principal: Principal) -> None:
        self.reader = reader
        self.principal = principal

    def visible(self, run: Run) -> Run:
        """`run` if this principal may see it; RunNotFound (as for a run that does not exist) if not."""
        if not self.principal.sees(run.principal):
            raise RunNotFound(run.id)
        return run

    def get_run(self, run_id: str) -> Run:
        return self.visible(self.reader.get_run(run_id))

    def run_pool(self, run: Run) -> Pool:
        """As RunReader.run_pool, for a run this principal may see."""
        return self.reader.run_pool(self.visible(run))

    def list_runs(self, limit: int = 20, status: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        """The principal's runs, newest first (an admin's: everyone's); `filters` as RunReader.list_runs."""
        return self.reader.list_runs(limit, status, principal=self._owner_filter(), **filters)

    def count_runs(self, status: str | None = None, *, pool: str | None = None) -> int:
        """How many of the principal's runs (an admin's: everyone's) match the list's filters."""
        return self.reader.count_runs(status, pool=pool, principal=self._owner_filter())

    def _owner_filter(self) -> str | None:
        return None if self.principal.admin else self.principal.name

    step_messages = _checked(RunReader.step_messages)
    follow = _checked(RunReader.follow)


class Access(Reads):
    """Everything a principal may do with runs through the service: start its own, and read, continue, answer
    and cancel the runs it may see."""

    def __init__(self, service: Service, principal: Principal) -> None:
        super().__init__(service, principal)
        self.service = service

    def _asked(self, request: RunRequest) -> RunRequest:
        return request.but(principal=self.principal.name)

    async def plan(self, request: RunRequest, on_event: ProgressCallback | None = None, sampling: bool = False) -> Run:
        return await self.service.plan(self._asked(request), on_event, sampling)

    def start(self, request: RunRequest, host: HostModel | None = None) -> Run:
        return self.service.start(self._asked(request), host=host)

    def estimate(self, run: Run) -> CostEstimate:
        """As Service.estimate, for a run this principal may see."""
        return self.service.estimate(self.visible(run))

    executes_here = _checked(Service.executes_here)
    continue_run = _checked(Service.continue_run)  # a follow-up run belongs to the principal of the run it follows
    answer_tool_calls = _checked(Service.answer_tool_calls)
    cancel = _checked(Service.cancel)
    wait = _checked(Service.wait)


class ReadFront:
    """What a read-only door (the viewer) holds of a run reader: the settings, the pools, and each principal's
    `Reads`."""

    def __init__(self, reader: RunReader) -> None:
        self._reader = reader

    @property
    def settings(self) -> Settings:
        return self._reader.settings

    @property
    def pools(self) -> PoolCatalog:
        return self._reader.pools

    def reads(self, principal: Principal) -> Reads:
        return Reads(self._reader, principal)


class Front(ReadFront):
    """What a door holds of the service: the read front, metrics, warm-up, and each principal's `Access`."""

    def __init__(self, service: Service) -> None:
        super().__init__(service)
        self._service = service

    @property
    def telemetry(self) -> Telemetry:
        return self._service.telemetry

    def warm_up(self) -> None:
        self._service.warm_up()

    def access(self, principal: Principal) -> Access:
        return Access(self._service, principal)
