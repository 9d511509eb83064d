"""The run page's pictures, drawn on the server as SVG: the workflow graph and the timeline of its steps.

Drawn here rather than in the browser so the page needs no graph library (nothing from a CDN, no big JS) and
reads the same with scripts off. Every piece of text comes from a model or a pool file, so it goes through
`html.escape`; positions are numbers computed here. Presentation attributes (fill, stroke) rather than inline
styles keep the strict Content-Security-Policy (no 'unsafe-inline') satisfied.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from html import escape

from conductor_mcp.core.records import Run, StepRecord

NODE_W, NODE_H, GAP_X, GAP_Y = 168, 46, 28, 36
ROW_H, LABEL_W, BAR_W = 22, 190, 620


@dataclass
class Node:
    """One box of the graph: a step (run or only planned), the task or the answer."""

    key: str
    label: str
    status: str
    sources: list[str]  # keys of the nodes it saw


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def source_key(parent: str | None, index: int) -> str:
    """The key of the step an access index points at, inside the same (possibly nested) workflow."""
    return f"{parent}.{index}" if parent else str(index)


def graph_nodes(run: Run, parent: str | None = None) -> list[Node]:
    """The nodes of one workflow level: the steps recorded at that level, else the planned workflow's steps."""
    steps = [s for s in run.steps if s.parent == parent]
    if steps:
        return [
            Node(s.key, f"{s.key} · {s.label()}", s.status, [source_key(parent, i) for i in s.access]) for s in steps
        ]
    if parent is None and run.workflow is not None:
        return [
            Node(str(i), f"{i} · {step.worker}", "planned", [str(j) for j in step.access])
            for i, step in enumerate(run.workflow.steps)
        ]
    return []


def _layers(nodes: list[Node]) -> dict[str, int]:
    """Each node's column: one past the deepest step it saw (steps in one column could run in parallel)."""
    layer: dict[str, int] = {}
    for node in nodes:  # access lists point backwards, so one pass in order suffices
        layer[node.key] = 1 + max((layer.get(k, 0) for k in node.sources), default=0)
    return layer


@dataclass
class Box:
    """A node where the graph draws it: its top-left corner, its label (cut to fit) and the fill of its status."""

    key: str
    label: str
    status: str
    x: int
    y: int
    fill: str
    step: bool  # a step (the task and the answer are not)


@dataclass
class Graph:
    """The workflow graph as numbers and short labels: drawn as SVG here, and by the MCP App (doors/mcp/app.py)."""

    width: int
    height: int
    box_w: int
    box_h: int
    edges: list[tuple[int, int, int, int]]  # x1, y1, x2, y2
    boxes: list[Box]


def graph_layout(run: Run, parent: str | None = None) -> Graph | None:
    """Where each box and edge of the graph goes: task -> steps (edges are access lists) -> answer."""
    nodes = graph_nodes(run, parent)
    if not nodes:
        return None
    layer = _layers(nodes)
    last = nodes[-1].key
    columns: dict[int, list[str]] = {0: ["task"]}
    for node in nodes:
        columns.setdefault(layer[node.key], []).append(node.key)
    end_col = max(columns) + 1
    columns[end_col] = ["answer"]
    where: dict[str, tuple[int, int]] = {}
    for col, keys in columns.items():
        for row, key in enumerate(keys):
            where[key] = (col * (NODE_W + GAP_X) + 4, row * (NODE_H + GAP_Y) + 4)
    width = (end_col + 1) * (NODE_W + GAP_X)
    height = max(len(keys) for keys in columns.values()) * (NODE_H + GAP_Y) - GAP_Y + 8
    pairs = [(source, node.key) for node in nodes for source in (node.sources or ["task"]) if source in where]
    pairs.append((last, "answer"))
    edges = [
        (where[s][0] + NODE_W, where[s][1] + NODE_H // 2, where[t][0], where[t][1] + NODE_H // 2) for s, t in pairs
    ]
    ends = [("task", "the task", "task", False), ("answer", "the answer", "answer", False)]
    boxes = [
        Box(key, _short(label, 24), status, *where[key], FILL.get(status, "#eef2fa"), step)
        for key, label, status, step in [*ends, *((n.key, n.label, n.status, True) for n in nodes)]
    ]
    return Graph(width, height, NODE_W, NODE_H, edges, boxes)


def workflow_svg(run: Run, parent: str | None = None) -> str:
    """The workflow as a left-to-right graph (see `graph_layout`)."""
    graph = graph_layout(run, parent)
    if graph is None:
        return ""
    width, height = graph.width, graph.height
    parts = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="workflow graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#667"/></marker></defs>',
    ]
    parts.extend(
        f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#889" stroke-width="1.5" marker-end="url(#arrow)"/>'
        for x1, y1, x2, y2 in graph.edges
    )
    parts.extend(_box(box) for box in graph.boxes)
    parts.append("</svg>")
    return "".join(parts)


FILL = {"done": "#e3f4e1", "running": "#fff4cc", "failed": "#fbe0e0", "cancelled": "#eee", "skipped": "#eee"}


def _box(box: Box) -> str:
    x, y = box.x, box.y
    drawn = (
        f'<g class="node status-{escape(box.status)}" data-key="{escape(box.key)}">'
        f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" fill="{box.fill}" stroke="#556"/>'
        f'<text x="{x + 8}" y="{y + 19}" font-size="12">{escape(box.label)}</text>'
        f'<text x="{x + 8}" y="{y + 36}" font-size="11" fill="#555">{escape(box.status)}</text></g>'
    )
    return f'<a href="#step-{escape(box.key)}">{drawn}</a>' if box.step else drawn


def _time(stamp: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(stamp) if stamp else None


def _seconds(start: dt.datetime, stamp: str | None) -> float | None:
    moment = _time(stamp)
    return None if moment is None else (moment - start).total_seconds()


def _ready_at(run: Run, step: StepRecord, start: dt.datetime) -> float:
    """When the step could have started: the last of the steps it saw ended (or its workflow was written)."""
    by_key = {s.key: s for s in run.steps}
    seen = (source_key(step.parent, i) for i in step.access)
    ends = [_seconds(start, by_key[k].ended_at) for k in seen if k in by_key]
    if step.parent in by_key:
        ends.append(_seconds(start, by_key[step.parent].started_at))
    return max((e for e in ends if e is not None), default=0.0)


@dataclass
class Bar:
    """One step's row of the timeline: waiting on its inputs from `ready` to `began`, running for `width`."""

    key: str
    label: str
    y: int
    ready: float
    began: float
    width: float
    fill: str
    note: str  # how long it ran, its attempts and fallbacks


@dataclass
class Timeline:
    """The timeline as numbers and short labels: drawn as SVG here, and by the MCP App (doors/mcp/app.py)."""

    width: int
    height: int
    ticks: list[tuple[float, str]]  # x, label
    bars: list[Bar]


def timeline_layout(run: Run) -> Timeline | None:
    """One row per step that ran here (a running step's bar reaches now)."""
    timed = [s for s in run.steps if s.started_at and s.inherited_from is None]
    start = _time(run.started_at) or (_time(min(s.started_at or "" for s in timed)) if timed else None)
    if start is None or not timed:
        return None
    stamp = dt.datetime.now(dt.UTC).isoformat()
    span = max(0.001, *(_seconds(start, s.ended_at or run.ended_at or stamp) or 0.0 for s in timed))
    scale = BAR_W / span
    width, height = LABEL_W + BAR_W + 120, (len(timed) + 1) * ROW_H + 8
    ticks = [(LABEL_W + tick * BAR_W / 4, f"{span * tick / 4:.2f}s") for tick in range(5)]
    bars = [_bar(run, step, start, row, scale, stamp) for row, step in enumerate(timed)]
    return Timeline(width, height, ticks, bars)


def _bar(run: Run, step: StepRecord, start: dt.datetime, row: int, scale: float, stamp: str) -> Bar:
    began = _seconds(start, step.started_at) or 0.0
    ended = _seconds(start, step.ended_at or stamp) or began
    ready = min(_ready_at(run, step, start), began)
    fill = {"done": "#5a9e5a", "failed": "#c0504d", "running": "#d9a400"}.get(step.status, "#999")
    notes = []
    if len(step.attempts) > 1:
        notes.append(f"{len(step.attempts)} attempts")
    if step.answered_by and step.answered_by != step.model:
        notes.append(f"fallback: {step.answered_by}")
    return Bar(
        key=step.key,
        label=_short(f"{'  ' * step.depth}{step.key} · {step.label()}", 30),
        y=row * ROW_H + 4,
        ready=LABEL_W + ready * scale,
        began=LABEL_W + began * scale,
        width=max(2.0, (ended - began) * scale),
        fill=fill,
        note=f"{ended - began:.2f}s {_short(', '.join(notes), 40)}",
    )


def timeline_svg(run: Run) -> str:
    """One row per step: waiting on its inputs (pale), running (solid), with attempts and fallbacks marked."""
    timeline = timeline_layout(run)
    if timeline is None:
        return ""
    width, height = timeline.width, timeline.height
    parts = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline">'
    ]
    for x, label in timeline.ticks:
        parts.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - 14}" stroke="#ddd"/>')
        parts.append(f'<text x="{x:.1f}" y="{height - 2}" font-size="10" fill="#666">{label}</text>')
    parts.extend(_timeline_row(bar) for bar in timeline.bars)
    parts.append("</svg>")
    return "".join(parts)


def _timeline_row(bar: Bar) -> str:
    y = bar.y
    return (
        f'<a href="#step-{escape(bar.key)}"><g class="row">'
        f'<text x="2" y="{y + 14}" font-size="11">{escape(bar.label)}</text>'
        f'<rect x="{bar.ready:.1f}" y="{y + 7}" width="{max(0.0, bar.began - bar.ready):.1f}" height="4" fill="#cdd"/>'
        f'<rect x="{bar.began:.1f}" y="{y + 3}" width="{bar.width:.1f}" height="12" rx="2" fill="{bar.fill}"/>'
        f'<text x="{bar.began + bar.width + 4:.1f}" y="{y + 13}" font-size="10" fill="#444">{escape(bar.note)}</text>'
        "</g></a>"
    )
