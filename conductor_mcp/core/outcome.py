"""How a run or a step ended, as a type: what stopped it (a limit, a failure, a cancel) and in words why.

Only the engine and the service set a Stop; every door maps one to its own terms in one function (the MCP result,
the OpenAI response status, the CLI's lines), so no door reads an outcome out of an error message.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

StopKind = Literal[
    "done",  # the workflow finished
    "call_cap",  # the run's cap on step and recursive conductor calls
    "depth_cap",  # recursion reached max_depth: the answer at that point stands
    "token_budget",  # the caller's max_tokens
    "usd_budget",  # the caller's max_usd
    "server_budget",  # the server's cap on all runs (CONDUCTOR_SERVER_MAX_TOKENS / _USD)
    "step_failed",  # a step failed for good (after retries and fallbacks)
    "internal_error",  # a bug: a step or the engine raised something it should not have
    "cancelled",  # the caller cancelled the run
    "interrupted",  # the server stopped, or its store could not be written; continue_workflow resumes it
]
LIMITS: frozenset[StopKind] = frozenset({"call_cap", "depth_cap", "token_budget", "usd_budget", "server_budget"})
BUDGETS: frozenset[StopKind] = frozenset({"token_budget", "usd_budget", "server_budget"})
EndStatus = Literal["interrupted", "cancelled", "failed"]  # how the service ends a run the engine did not finish
END_KINDS: dict[EndStatus, StopKind] = {
    "interrupted": "interrupted",
    "cancelled": "cancelled",
    "failed": "internal_error",
}


class Stop(BaseModel):
    """What ended a run (or held a step back) and why; `step` names the step it concerns, if one."""

    kind: StopKind
    detail: str = Field(description="what happened, in words a caller can act on")
    step: str | None = Field(default=None, description="the key of the step it concerns")

    @property
    def is_limit(self) -> bool:
        """A cap or budget: a clean stop that keeps the best answer so far, not a failure."""
        return self.kind in LIMITS


def legacy_stop(reason: str) -> Stop:
    """A run stored before outcomes were typed kept only `stop_reason` (a recursion cap): read it as a Stop."""
    kind: StopKind = "depth_cap" if "depth cap" in reason else "call_cap"
    return Stop(kind=kind, detail=reason)
