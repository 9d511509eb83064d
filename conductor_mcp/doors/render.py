"""Renderings people and calling models read: a markdown summary (answer first), a mermaid topology, and where a person
can see a run (the viewer's address, when this server serves one: HTTP only)."""

from __future__ import annotations

from dataclasses import dataclass

from conductor_mcp.core.agent_records import StepWork
from conductor_mcp.core.final_work import final_work
from conductor_mcp.core.records import Run, StepRecord


def _excerpt(text: str | None, limit: int) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _node(key: str) -> str:
    return "s" + key.replace(".", "_")


def mermaid(run: Run) -> str:
    """The workflow's topology: who saw whom. Steps with no edge between them ran in parallel; a corrective
    workflow hangs off the conductor step that wrote it (dotted edges)."""
    lines = ["flowchart LR", '  task(["task"])']
    for step in run.steps:
        lines.append(f'  {_node(step.key)}["{step.key}: {step.label()}"]')
        if not step.access:
            lines.append(
                f"  {_node(step.parent)} -.-> {_node(step.key)}" if step.parent else f"  task --> {_node(step.key)}"
            )
        for source in step.access:
            source_key = f"{step.parent}.{source}" if step.parent else str(source)
            lines.append(f"  {_node(source_key)} --> {_node(step.key)}")
    return "\n".join(lines)


def worker_choice(run: Run) -> str:
    """Who the run could use: the caller's choice, and the pool ids it left (the host's model dropped out when the
    client could not answer sampling)."""
    asked = run.workers.describe() if run.workers is not None else "all"
    return f"{asked} → {', '.join(run.worker_ids) if run.worker_ids is not None else 'every worker of the pool'}"


def patch_line(run: Run, record: StepRecord, work: StepWork) -> str:
    """The final patch in one line: how much it changes, against which tree, and where it is."""
    files = work.patch_files
    added, removed = sum(f.added or 0 for f in files), sum(f.removed or 0 for f in files)
    where = f"conductor://runs/{run.id}/steps/{record.key}/patch" if work.patch is not None else work.patch_note
    changed = f"{len(files)} files changed, +{added} -{removed} lines"
    return f"{changed}, by step {record.key} against {work.root.source} ({where})"


def agent_warning(step: StepRecord) -> str | None:
    """Why an agent step that ended well may not have done its work (None: no such doubt)."""
    agent = step.work.agent if step.work is not None else None
    return agent.warning if agent is not None and step.status == "done" else None


def to_markdown(run: Run, answer_limit: int = 6000, instruction_limit: int = 80) -> str:
    """A compact summary for people and calling models: answer first, then the step table and topology."""
    t = run.totals
    parts = [f"## Answer\n\n{_excerpt_block(run.answer, answer_limit)}"]
    if run.error:
        parts.append(f"**Error:** {run.error}")
    parts.append(
        f"**Run** `{run.id}` · status **{run.status}** · pool `{run.pool}` · "
        f"{t.steps} steps, {t.calls} calls, {t.total_tokens} tokens, ${t.cost_usd:.4f}, {t.wall_s:.1f}s"
    )
    if run.workers is not None or run.worker_ids is not None:
        parts.append(f"**Workers:** {worker_choice(run)}")
    if run.stop is not None and run.stop.is_limit:
        parts.append(f"**Stopped early** ({run.stop.kind.replace('_', ' ')}): {run.stop.detail}")
    if (found := final_work(run)) is not None:
        parts.append(f"**Patch:** {patch_line(run, *found)}")
    warned = [f"step {s.key}: {warning}" for s in run.steps if (warning := agent_warning(s))]
    if warned:
        parts.append("**Warning:** " + "; ".join(warned))
    if run.fallback_reason:
        parts.append(f"**Conductor fallback:** {run.fallback_reason}")
    if run.repairs:
        parts.append("**Repairs:** " + "; ".join(f"{r.fault} → {r.action}" for r in run.repairs))
    if run.steps:
        rows = [
            "| # | worker | instruction | sees | status | tokens | cost | latency |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in sorted(run.steps, key=lambda step: step.order):
            sees = ",".join(map(str, s.access)) or "task"
            instruction = _cell(_excerpt(s.instruction, instruction_limit))
            tokens = s.prompt_tokens + s.completion_tokens
            key = "↳ " * s.depth + s.key
            rows.append(
                f"| {key} | {_cell(s.label())} | {instruction} | {sees} | {s.status} "
                f"| {tokens} | ${s.cost_usd:.4f} | {s.latency_s:.2f}s |"
            )
        parts.append("\n".join(rows))
        parts.append(f"```mermaid\n{mermaid(run)}\n```")
    elif run.workflow and run.workflow.steps:
        rows = ["| # | worker | instruction | sees |", "|---|---|---|---|"]
        for i, step in enumerate(run.workflow.steps):
            sees = ",".join(map(str, step.access)) or "task"
            rows.append(
                f"| {i} | {_cell(step.worker)} | {_cell(_excerpt(step.instruction, instruction_limit))} | {sees} |"
            )
        parts.append(
            "**Planned workflow** (not run yet)" + (f": {run.workflow.reasoning}" if run.workflow.reasoning else "")
        )
        parts.append("\n".join(rows))
    return "\n\n".join(parts) + "\n"


def _excerpt_block(text: str | None, limit: int) -> str:
    if not text:
        return "_(no answer)_"
    return (
        text
        if len(text) <= limit
        else text[:limit] + f"\n\n… ({len(text) - limit} more characters in the full transcript)"
    )


@dataclass(frozen=True)
class Links:
    """The viewer's base URL (`http://host:port/ui/`), given by whoever serves it; None when nothing does."""

    viewer_base: str | None = None

    def run(self, run_id: str) -> str | None:
        """The viewer's page for a run, when a viewer is served."""
        return f"{self.viewer_base}runs/{run_id}" if self.viewer_base else None
