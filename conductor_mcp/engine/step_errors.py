"""What a workflow's task group raised, reduced to the one error the run stops with."""

from __future__ import annotations

from conductor_mcp.errors import StoreError
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)


def first_cause(group: BaseExceptionGroup) -> BaseException:
    """The error a task group gathered, unwrapped (nested groups from nested workflows included): a StoreError
    first, since the run must then stop as interrupted; the rest are logged."""
    leaves: list[BaseException] = []

    def collect(error: BaseException) -> None:
        if isinstance(error, BaseExceptionGroup):
            for inner in error.exceptions:
                collect(inner)
        else:
            leaves.append(error)

    collect(group)
    leaves.sort(key=lambda error: not isinstance(error, StoreError))
    for other in leaves[1:]:
        log.error("step_error_also_raised", error=f"{type(other).__name__}: {other}")
    return leaves[0]
