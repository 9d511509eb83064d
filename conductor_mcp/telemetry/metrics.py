"""Prometheus metrics of one service: what its runs, steps, model calls and store did, in its own registry.

The registry is the service's, not prometheus_client's global one, so two services in one process (tests, an
embedding application) each count their own. Everything here is fed from the run's records at a few moments (a
run starts, the conductor has planned, a step ends, the run ends) by telemetry/observer.py; the store's errors and
the replicas' leases are read when Prometheus scrapes, so nothing on the hot path asks the store anything.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Protocol, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from conductor_mcp.core.pool import CONDUCTOR_ID
from conductor_mcp.core.records import Attempt, Run, StepRecord
from conductor_mcp.errors import StoreError

STEP_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
M = TypeVar("M", bound=MetricWrapperBase)
RUN_BUCKETS_S = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class StoreHealth(Protocol):
    """What a scrape reads of the run store (runs/store.py's Store): its backend and its failures so far."""

    @property
    def backend(self) -> str: ...

    @property
    def failures(self) -> int: ...


class Replicas(Protocol):
    """What a scrape reads of the leases (runs/leases.py's Liveness): how many processes hold one now."""

    def live_count(self) -> int: ...


class Metrics:
    """The service's counters, gauges and histograms (names start `conductor_`; see docs/operate/observability.md)."""

    def __init__(self, store: StoreHealth, liveness: Replicas) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs_started = Counter("conductor_runs_started", "Run executions started", ["pool"], registry=r)
        self.runs_finished = Counter(
            "conductor_runs_finished", "Run executions ended, by the run's status", ["pool", "status"], registry=r
        )
        self.runs_in_flight = Gauge("conductor_runs_in_flight", "Runs executing in this process", ["pool"], registry=r)
        self.run_seconds = Histogram(
            "conductor_run_duration_seconds",
            "Wall time of a run's execution",
            ["pool", "status"],
            buckets=RUN_BUCKETS_S,
            registry=r,
        )
        self.steps = Counter("conductor_steps", "Steps that ran, by how they ended", ["worker", "status"], registry=r)
        self.step_seconds = Histogram(
            "conductor_step_duration_seconds",
            "Wall time of a step, retries and fallbacks included",
            ["worker"],
            buckets=STEP_BUCKETS_S,
            registry=r,
        )
        self.tokens = Counter(
            "conductor_tokens",
            "Tokens used (input: prompt, output: completion)",
            ["pool", "worker", "direction"],
            registry=r,
        )
        self.cost = Counter("conductor_cost_usd", "USD spent on model calls", ["pool", "worker"], registry=r)
        self.retries = Counter("conductor_provider_retries", "Model calls retried after a fault", ["model"], registry=r)
        self.fallbacks = Counter(
            "conductor_provider_fallbacks", "Models given up on for the next fallback", ["model"], registry=r
        )
        self.repairs = Counter(
            "conductor_conductor_repairs", "Repairs made to the conductor's workflows", ["pool"], registry=r
        )
        self.conductor_fallbacks = Counter(
            "conductor_conductor_fallbacks", "Workflows replaced by the one-step fallback", ["pool"], registry=r
        )
        r.register(StoreCollector(store, liveness))
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}

    def _of(self, metric: M, *values: str) -> M:
        """`metric.labels(*values)`, looked up once per label set: prometheus_client takes a lock and checks the
        values on every call, and a run asks for a dozen children. The children are the ones the metric keeps."""
        child = self._children.get((metric, values))
        if child is None:
            child = self._children[(metric, values)] = metric.labels(*values)
        return cast(M, child)  # made by `metric.labels`: the metric's own type

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format, as a scrape gets it."""
        return generate_latest(self.registry)

    def run_started(self, run: Run) -> None:
        self._of(self.runs_started, run.pool).inc()
        self._of(self.runs_in_flight, run.pool).inc()

    def planned(self, run: Run) -> None:
        """The conductor has written the run's workflow: its calls' usage, repairs and whether it fell back."""
        for call in run.conductor_calls:
            self._usage(run.pool, CONDUCTOR_ID, call.prompt_tokens, call.completion_tokens, call.cost_usd)
            self._attempts(call.attempts)
        if run.repairs:
            self._of(self.repairs, run.pool).inc(len(run.repairs))
        if run.fallback_reason:
            self._of(self.conductor_fallbacks, run.pool).inc()

    def step_ended(self, run: Run, step: StepRecord, seconds: float | None) -> None:
        """A step ended (done, failed, or cancelled with its run): count it, its usage and its calls' faults."""
        self._of(self.steps, step.worker_id, step.status).inc()
        if seconds is not None:
            self._of(self.step_seconds, step.worker_id).observe(seconds)
        self._usage(run.pool, step.worker_id, step.prompt_tokens, step.completion_tokens, step.cost_usd)
        self._attempts(step.attempts)
        if step.conductor_call is not None and step.conductor_call.repairs:
            self._of(self.repairs, run.pool).inc(len(step.conductor_call.repairs))

    def run_finished(self, run: Run, seconds: float) -> None:
        self._of(self.runs_in_flight, run.pool).dec()
        self._of(self.runs_finished, run.pool, run.status).inc()
        self._of(self.run_seconds, run.pool, run.status).observe(seconds)

    def _usage(self, pool: str, worker: str, prompt: int, completion: int, usd: float) -> None:
        if prompt:
            self._of(self.tokens, pool, worker, "input").inc(prompt)
        if completion:
            self._of(self.tokens, pool, worker, "output").inc(completion)
        if usd:
            self._of(self.cost, pool, worker).inc(usd)

    def _attempts(self, attempts: list[Attempt]) -> None:
        """A failed attempt followed by one of the same model was retried; followed by another model, fell back."""
        for failed, after in itertools.pairwise(attempts):
            if not failed.ok:
                self._of(self.retries if after.model == failed.model else self.fallbacks, failed.model).inc()


class StoreCollector(Collector):
    """Read at scrape time: the store's errors since the service opened it, and how many processes hold a lease
    on the store (the replicas alive)."""

    def __init__(self, store: StoreHealth, liveness: Replicas) -> None:
        self.store = store
        self.liveness = liveness

    def describe(self) -> Iterable[Metric]:
        return []  # nothing to check for clashes at registration; collect() would ask the store (PostgreSQL)

    def collect(self) -> Iterable[Metric]:
        labels = [self.store.backend]
        try:
            live: int | None = self.liveness.live_count()
        except (StoreError, OSError):
            live = None  # a StoreError is counted by the store itself
        errors = CounterMetricFamily("conductor_store_errors", "Store operations that failed", labels=["backend"])
        errors.add_metric(labels, self.store.failures)
        yield errors
        if live is not None:
            replicas = GaugeMetricFamily(
                "conductor_replicas_live", "Processes holding a lease on this store", labels=["backend"]
            )
            replicas.add_metric(labels, live)
            yield replicas
