"""The viewer's HTML: the run list and the run page, rendered on the server.

Everything shown comes from models, tasks or pool files and is untrusted: every value passes through `_e`
(html.escape, quotes included) or `_u` (URL-quoting for path segments); model outputs are rendered as sanitised
markdown (doors/viewer/markdown.py: no raw HTML, no images, http(s) and mailto links only) with the raw text one
click away. The pages carry no inline script or style (the CSP forbids both); the small script in
static/viewer.js only swaps server-rendered fragments in.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from conductor_mcp.core.records import RUN_STATUSES, ConductorCall, Run, StepRecord
from conductor_mcp.doors.render import worker_choice
from conductor_mcp.doors.viewer.list_page import ListPage
from conductor_mcp.doors.viewer.markdown import escaped as _e
from conductor_mcp.doors.viewer.markdown import output_html
from conductor_mcp.doors.viewer.svg import source_key, timeline_svg, workflow_svg
from conductor_mcp.doors.viewer.work import work_section


def _u(value: str) -> str:
    return quote(value, safe="")


def run_href(run_id: str) -> str:
    return f"/ui/runs/{_u(run_id)}"


def page(title: str, body: str, live: str | None = None) -> str:
    """A whole page: the stylesheet and script are the package's own files, served from /ui/static/."""
    live_attr = f' data-live="{_e(live)}"' if live else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{_e(title)}</title><link rel="stylesheet" href="/ui/static/viewer.css">'
        '<script src="/ui/static/viewer.js" defer></script></head>'
        f'<body><header><a href="/ui/">conductor-mcp · runs</a></header><main{live_attr}>{body}</main></body></html>'
    )


def _money(usd: float) -> str:
    return f"${usd:.4f}"


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# ------------------------------------------------------------------------------------------------ the list


def list_page(listed: ListPage, filters: dict[str, str], pools: list[str]) -> str:
    """Runs newest first, a filter form (status, pool), how many match, and links to the newer and older pages."""
    rows = listed.rows
    status_options = "".join(
        f'<option value="{s}"{" selected" if filters.get("status") == s else ""}>{s}</option>' for s in RUN_STATUSES
    )
    pool_options = "".join(f'<option value="{_e(p)}"></option>' for p in pools)
    form = (
        '<form class="filters" method="get" action="/ui/">'
        f'<label>status <select name="status"><option value="">any</option>{status_options}</select></label> '
        f'<label>pool <input name="pool" list="pools" value="{_e(filters.get("pool", ""))}"></label>'
        f'<datalist id="pools">{pool_options}</datalist> <button type="submit">filter</button></form>'
    )
    head = "<tr><th>created</th><th>status</th><th>pool</th><th>task</th><th>tokens</th><th>cost</th><th>wall</th></tr>"
    body = "".join(_list_row(row) for row in rows) or '<tr><td colspan="7">no runs</td></tr>'
    kept = {k: v for k, v in filters.items() if k not in ("before", "after")}
    pager = f'<nav class="pager"><span class="count">{listed.total} run{"" if listed.total == 1 else "s"}</span> '
    if filters.get("before") or filters.get("after"):
        pager += f'<a class="newest" href="/ui/?{urlencode(kept)}">newest</a> '
    if listed.newer:
        pager += f'<a class="newer" href="/ui/?{urlencode({**kept, "after": listed.newer})}">← newer</a> '
    if listed.older:
        pager += f'<a class="older" href="/ui/?{urlencode({**kept, "before": listed.older})}">older →</a>'
    pager += "</nav>"
    table = f'<table class="runs"><thead>{head}</thead><tbody>{body}</tbody></table>'
    sign_out = '<form class="sign-out" method="post" action="/ui/logout"><button type="submit">sign out</button></form>'
    return page("conductor-mcp runs", f"<h1>Runs</h1>{form}{table}{pager}{sign_out}")


def _list_row(row: dict[str, Any]) -> str:
    totals = row.get("totals") or {}
    task = _short(str(row["task"]), 110)
    follow = ' <span class="tag">follow-up</span>' if row.get("parent_id") else ""
    return (
        f'<tr class="run status-{_e(row["status"])}" data-run="{_e(row["id"])}">'
        f"<td>{_e(str(row['created_at'])[:19].replace('T', ' '))}</td>"
        f'<td><span class="badge status-{_e(row["status"])}">{_e(row["status"])}</span></td>'
        f"<td>{_e(row['pool'])}</td>"
        f'<td><a href="{run_href(str(row["id"]))}">{_e(task) or "(empty task)"}</a>{follow}</td>'
        f"<td>{int(totals.get('total_tokens', 0))}</td><td>{_money(float(totals.get('cost_usd', 0.0)))}</td>"
        f"<td>{float(totals.get('wall_s', 0.0)):.1f}s</td></tr>"
    )


# ------------------------------------------------------------------------------------------------ a run


def run_page(run: Run, children: list[dict[str, Any]]) -> str:
    live = f"{run_href(run.id)}/events" if run.status == "running" else None
    return page(f"run {run.id}", f'<div id="run-body">{run_body(run, children)}</div>', live)


def run_body(run: Run, children: list[dict[str, Any]]) -> str:
    """The part of the run page that changes while the run executes (the live script swaps it in)."""
    parts = [
        f'<h1>Run <code>{_e(run.id)}</code> <span class="badge status-{_e(run.status)}" id="run-status">'
        f"{_e(run.status)}</span></h1>",
        _facts(run, children),
        _totals(run),
        f'<section><h2>Task</h2><pre class="text">{_e(run.task)}</pre>',
        f'<details><summary>context</summary><pre class="text">{_e(run.context or "")}</pre></details>'
        if run.context
        else "",
        "</section>",
        f"<section><h2>Answer</h2>{output_html(run.answer or '(no answer yet)', 'answer')}</section>",
    ]
    graph = workflow_svg(run)
    if graph:
        parts.append(f'<section><h2>Workflow</h2><div class="scroll">{graph}</div></section>')
    timeline = timeline_svg(run)
    if timeline:
        parts.append(f'<section><h2>Timeline</h2><div class="scroll">{timeline}</div></section>')
    parts.append(_conductor(run))
    top = [s for s in run.steps if s.parent is None]
    parts.append(f"<section><h2>Steps</h2>{''.join(_step(run, s) for s in top) or '<p>no steps yet</p>'}</section>")
    return "".join(parts)


def _facts(run: Run, children: list[dict[str, Any]]) -> str:
    rows = [
        ("pool", _e(run.pool)),
        ("started by", _e(run.principal)),
        ("conductor", _e(run.conductor_model)),
        ("created", _e(run.created_at)),
        ("started", _e(run.started_at or "")),
        ("ended", _e(run.ended_at or "")),
    ]
    if run.workers is not None or run.worker_ids is not None:
        rows.append(("workers", _e(worker_choice(run))))
    if run.trace_id:
        rows.append(("trace", f'<code class="trace">{_e(run.trace_id)}</code>'))
    if run.parent_id:
        rows.append(("follow-up of", f'<a class="parent" href="{run_href(run.parent_id)}">{_e(run.parent_id)}</a>'))
    if children:
        links = ", ".join(f'<a class="child" href="{run_href(str(c["id"]))}">{_e(c["id"])}</a>' for c in children)
        rows.append(("follow-ups", links))
    stopped = f"{run.stop.kind.replace('_', ' ')}: {run.stop.detail}" if run.stop and run.stop.is_limit else None
    for name, value in (("stopped early", stopped), ("error", run.error)):
        if value:
            rows.append((name, _e(value)))
    return '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _totals(run: Run) -> str:
    t = run.totals
    cells = [
        ("steps", t.steps),
        ("calls", t.calls),
        ("prompt tokens", t.prompt_tokens),
        ("completion tokens", t.completion_tokens),
        ("cost", _money(t.cost_usd)),
        ("conductor tokens", t.conductor_tokens),
        ("conductor cost", _money(t.conductor_cost_usd)),
        ("wall", f"{t.wall_s:.2f}s"),
    ]
    return (
        '<table class="totals"><tr>'
        + "".join(f"<th>{k}</th>" for k, _ in cells)
        + "</tr><tr>"
        + "".join(f"<td>{_e(v)}</td>" for _, v in cells)
        + "</tr></table>"
    )


def _conductor(run: Run) -> str:
    parts = ["<section><h2>Conductor</h2>"]
    if run.workflow and run.workflow.reasoning:
        parts.append(f'<h3>Reasoning</h3><pre class="text reasoning">{_e(run.workflow.reasoning)}</pre>')
    if run.fallback_reason:
        parts.append(f'<p class="warn">fallback workflow: {_e(run.fallback_reason)}</p>')
    if run.repairs:
        items = "".join(
            f"<li>{'' if r.step is None else f'step {r.step}: '}{_e(r.fault)} → {_e(r.action)}</li>"
            for r in run.repairs
        )
        parts.append(f'<h3>Repairs</h3><ul class="repairs">{items}</ul>')
    parts.extend(_conductor_call(i, call) for i, call in enumerate(run.conductor_calls))
    parts.append("</section>")
    return "".join(parts)


def _conductor_call(i: int, call: ConductorCall) -> str:
    tokens = call.prompt_tokens + call.completion_tokens
    summary = (
        f"call {i}: {_e(call.model)} · {tokens} tokens · {_money(call.cost_usd)} · {call.latency_s:.2f}s"
        f" · {len(call.attempts)} attempts" + (f" · error: {_e(call.error)}" if call.error else "")
    )
    raw = _e(call.raw_output or "(none)")
    return f'<details class="conductor-call"><summary>{summary}</summary><pre class="text">{raw}</pre></details>'


def _step(run: Run, step: StepRecord) -> str:
    tokens = step.prompt_tokens + step.completion_tokens
    summary = (
        f'<span class="key">{_e(step.key)}</span> {_e(step.label())} '
        f'<span class="badge status-{_e(step.status)}">{_e(step.status)}</span> '
        f"{tokens} tokens · {_money(step.cost_usd)} · {step.latency_s:.2f}s · {len(step.attempts)} attempts"
    )
    seen = [source_key(step.parent, i) for i in step.access]
    sees = ", ".join(f'<a href="#step-{_e(k)}">{_e(k)}</a>' for k in seen) or "the task only"
    facts = [
        ("model", _e(step.model)),
        ("answered by", _e(step.answered_by or "")),
        ("sees", sees),
        ("finish", _e(step.finish_reason or "")),
        ("started", _e(step.started_at or "")),
        ("ended", _e(step.ended_at or "")),
        ("messages digest", _e(step.messages_digest or "")),
    ]
    if step.inherited_from:
        facts.append(("taken from run", f'<a href="{run_href(step.inherited_from)}">{_e(step.inherited_from)}</a>'))
    if step.truncated_inputs:
        facts.append(("inputs cut to the limit", _e(", ".join(map(str, step.truncated_inputs)))))
    if step.error:
        facts.append(("error", _e(step.error)))
    messages_url = f"{run_href(run.id)}/steps/{_u(step.key)}/messages"
    body = [
        '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>",
        f'<h4>Instruction</h4><pre class="text">{_e(step.instruction)}</pre>',
        f"<h4>Output</h4>{output_html(step.output or '', 'output')}",
        work_section(step),
        _client_tools(step),
        _attempts(step),
        f'<h4>Messages received</h4><div class="messages" data-src="{messages_url}?part=1">'
        f'<a href="{messages_url}">show the exact messages</a></div>',
        _nested(run, step),
    ]
    return (
        f'<details class="step status-{_e(step.status)}" id="step-{_e(step.key)}" data-key="{_e(step.key)}">'
        f'<summary>{summary}</summary><div class="step-body">{"".join(body)}</div></details>'
    )


def _client_tools(step: StepRecord) -> str:
    """A tool turn's results from the client, and the client's tools the step called (OpenAI door)."""
    rows = [("result for", r.call_id, "", r.output) for r in step.tool_results]
    rows += [("called", c.id, c.name, c.arguments) for c in step.tool_calls]
    if not rows:
        return ""
    body = "".join(
        f'<tr><td>{kind}</td><td>{_e(call)}</td><td>{_e(name)}</td><td><pre class="text">{_e(_short(text, 4000))}'
        "</pre></td></tr>"
        for kind, call, name, text in rows
    )
    head = "<tr><th></th><th>call id</th><th>tool</th><th>arguments / output</th></tr>"
    return f'<h4>Client tools</h4><table class="attempts">{head}{body}</table>'


def _attempts(step: StepRecord) -> str:
    if not step.attempts:
        return ""
    rows = "".join(
        f"<tr><td>{i}</td><td>{_e(a.model)}</td><td>{'ok' if a.ok else 'failed'}</td><td>{a.latency_s:.2f}s</td>"
        f"<td>{_e(a.error or '')}</td></tr>"
        for i, a in enumerate(step.attempts)
    )
    head = "<tr><th>#</th><th>model</th><th>result</th><th>latency</th><th>error</th></tr>"
    return f'<h4>Attempts</h4><table class="attempts">{head}{rows}</table>'


def _nested(run: Run, step: StepRecord) -> str:
    """A conductor step's corrective workflow: its reasoning, its graph and its steps, inside the step."""
    inner = [s for s in run.steps if s.parent == step.key]
    if step.workflow is None and not inner:
        return ""
    parts = ['<div class="nested"><h4>Corrective workflow</h4>']
    if step.workflow is not None and step.workflow.reasoning:
        parts.append(f'<pre class="text reasoning">{_e(step.workflow.reasoning)}</pre>')
    parts.append(f'<div class="scroll">{workflow_svg(run, step.key)}</div>')
    parts.extend(_step(run, s) for s in inner)
    parts.append("</div>")
    return "".join(parts)


def messages_fragment(messages: list[dict[str, Any]] | None) -> str:
    """The exact messages a step's model received, each role and content shown as text."""
    if not messages:
        return '<p class="none">no messages stored for this step</p>'
    items = []
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, indent=2, ensure_ascii=False)
        if message.get("tool_calls"):  # an assistant turn that called the client's tools
            text += "\n" + json.dumps(message["tool_calls"], indent=2, ensure_ascii=False)
        if message.get("tool_call_id"):
            text = f"(result for {message['tool_call_id']})\n{text}"
        items.append(
            f'<div class="message"><div class="role">{_e(message.get("role", "?"))}</div>'
            f'<pre class="text">{_e(text)}</pre></div>'
        )
    return f'<div class="message-list">{"".join(items)}</div>'


def messages_page(run_id: str, key: str, messages: list[dict[str, Any]] | None) -> str:
    back = f'<p><a href="{run_href(run_id)}#step-{_e(key)}">back to the run</a></p>'
    heading = f"<h1>Step {_e(key)}: messages received</h1>"
    return page(f"run {run_id} step {key}", f"{heading}{back}{messages_fragment(messages)}")


def message_page(title: str, text: str, status_form: str = "") -> str:
    """A short page with one message (not found, login) and an optional form."""
    return page(title, f"<h1>{_e(title)}</h1><p>{_e(text)}</p>{status_form}")


LOGIN_FORM = (
    '<form method="post" action="/ui/login"><label>token <input type="password" name="token" autocomplete="off">'
    '</label> <button type="submit">sign in</button></form>'
)
