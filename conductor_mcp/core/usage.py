"""What calls cost and what a run or a server may spend: usage counts, totals and budgets (one check each)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from conductor_mcp.core.outcome import Stop


class CallUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0


class Totals(BaseModel):
    steps: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    conductor_tokens: int = 0
    conductor_cost_usd: float = 0.0
    wall_s: float = 0.0


class Budget(BaseModel):
    """Caps on spending; `None` means no cap. The one check of a next call against them is `exceeded_by`."""

    max_tokens: int | None = Field(default=None, ge=1)
    max_usd: float | None = Field(default=None, gt=0)

    def capped(self) -> bool:
        """Whether any cap is set: without one, no spending need be added up before a call."""
        return self.max_tokens is not None or self.max_usd is not None

    def exceeded_by(self, spent: tuple[int, float], next_call: tuple[int, float]) -> Stop | None:
        """The stop a next call of ~`next_call` (tokens, USD) on top of `spent` would meet, or None."""
        (tokens, usd), (next_tokens, next_usd) = spent, next_call
        if self.max_tokens is not None and tokens + next_tokens > self.max_tokens:
            detail = f"token budget reached: {tokens} spent + ~{next_tokens} for the next call > {self.max_tokens}"
            return Stop(kind="token_budget", detail=detail)
        if self.max_usd is not None and usd + next_usd > self.max_usd:
            detail = f"USD budget reached: ${usd:.4f} spent + ~${next_usd:.4f} for the next call > ${self.max_usd}"
            return Stop(kind="usd_budget", detail=detail)
        return None


class ServerBudget(Budget):
    """Caps on what one server process may spend across all its runs (CONDUCTOR_SERVER_MAX_TOKENS / _USD).

    Calls admitted but not yet paid, in any run, count at their estimates (`claim` ... `settle`): runs in flight
    together would otherwise each see only what is paid and pass the cap between them."""

    tokens: int = 0
    usd: float = 0.0
    unpaid_tokens: int = 0
    unpaid_usd: float = 0.0

    def add(self, usage: CallUsage) -> None:
        self.tokens += usage.prompt_tokens + usage.completion_tokens
        self.usd += usage.cost_usd

    def claim(self, tokens: int, usd: float) -> None:
        """A call is admitted at this estimate; it counts until `settle`d with the same figures."""
        self.unpaid_tokens += tokens
        self.unpaid_usd += usd

    def settle(self, tokens: int, usd: float) -> None:
        """A claimed call is paid (its usage `add`ed), failed, or cancelled: its estimate no longer counts."""
        self.unpaid_tokens -= tokens
        self.unpaid_usd = max(0.0, self.unpaid_usd - usd)  # float sums need not return to exactly 0

    def exhausted(self) -> str | None:
        """Why no new run may start (a cap already reached), or None."""
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return f"server token budget exhausted: {self.tokens} of {self.max_tokens} spent"
        if self.max_usd is not None and self.usd >= self.max_usd:
            return f"server USD budget exhausted: ${self.usd:.4f} of ${self.max_usd} spent"
        return None

    def next_call_exceeds(self, tokens: int, usd: float) -> Stop | None:
        """The stop a next call of ~(tokens, usd) meets, counting what every run has paid and claimed."""
        stop = self.exceeded_by((self.tokens + self.unpaid_tokens, self.usd + self.unpaid_usd), (tokens, usd))
        return None if stop is None else Stop(kind="server_budget", detail=f"server {stop.detail}")


@dataclass
class CostEstimate:
    """What running a workflow may cost (the `plan` tool): a range, and the workers no price is known for."""

    low_usd: float
    high_usd: float
    unpriced_workers: list[str]
    assumption: str
