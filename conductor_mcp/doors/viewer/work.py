"""The viewer's part of a step that worked in a workspace: where it started, what the agent CLI ran (command line,
version, exit status, the commands with their exit codes), the tool calls of a tool-using model, and the diff.
Everything here came from an agent or a tool and is shown escaped, as text in <pre>, bounded (a diff's lines in
classed spans, so the stylesheet colours what was added and removed)."""

from __future__ import annotations

from conductor_mcp.core.agent_records import StepWork
from conductor_mcp.core.limits import DIFF_SHOWN_CHARS, VIEWER_SHOWN_CHARS
from conductor_mcp.core.records import StepRecord
from conductor_mcp.doors.viewer.markdown import escaped as _e


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}\n[... {len(text) - limit} more characters]"


def work_section(step: StepRecord) -> str:
    """The step's workspace, agent record, tool calls and diff, or nothing when it worked in no workspace."""
    work = step.work
    if work is None:
        return ""
    return "".join([_facts(work), _commands(work), _tool_uses(work), _diff(work)])


def _facts(work: StepWork) -> str:
    base = work.base
    facts = [
        ("workspace", f"{base.kind} of {base.source}" + (f" (from workspace {base.parent})" if base.parent else "")),
        ("base commit", base.commit or ""),
        ("uncommitted changes", base.changes_digest or "none"),
    ]
    agent = work.agent
    if agent is not None:
        facts += [
            ("agent", f"{agent.cli} {agent.version or ''}".strip()),
            ("command line", agent.command_line),
            ("exit status", "killed at its deadline" if agent.timed_out else str(agent.exit_status)),
            ("duration", f"{agent.latency_s:.2f}s"),
        ]
        if agent.warning:
            facts.append(("warning", agent.warning))
        if agent.stderr_tail:
            facts.append(("stderr (end)", _cut(agent.stderr_tail, VIEWER_SHOWN_CHARS)))
    if work.patch_note:
        facts.append(("patch", work.patch_note))
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts)
    return f'<h4>Workspace</h4><dl class="facts">{rows}</dl>'


def _commands(work: StepWork) -> str:
    if work.agent is None or not work.agent.commands:
        return ""
    rows = "".join(
        f'<tr><td><pre class="text">{_e(_cut(c.command, VIEWER_SHOWN_CHARS))}</pre></td><td>{_e(c.exit_code)}</td>'
        f'<td><pre class="text">{_e(_cut(c.output_tail or "", VIEWER_SHOWN_CHARS))}</pre></td></tr>'
        for c in work.agent.commands
    )
    head = "<tr><th>command</th><th>exit</th><th>output (end)</th></tr>"
    return f'<h4>Commands the agent ran</h4><table class="attempts">{head}{rows}</table>'


def _tool_uses(work: StepWork) -> str:
    if not work.tool_uses:
        return ""
    rows = "".join(
        f"<tr><td>{u.turn}</td><td>{_e(u.name)}</td>"
        f'<td><pre class="text">{_e(_cut(u.arguments, VIEWER_SHOWN_CHARS))}</pre></td>'
        f'<td><pre class="text">{_e(_cut(u.output, VIEWER_SHOWN_CHARS))}</pre></td>'
        f"<td>{'error' if u.error else 'ok'}</td></tr>"
        for u in work.tool_uses
    )
    head = "<tr><th>turn</th><th>tool</th><th>arguments</th><th>result</th><th></th></tr>"
    return f'<h4>Workspace tool calls</h4><table class="attempts">{head}{rows}</table>'


def _diff(work: StepWork) -> str:
    diff = work.diff
    if diff is None or not diff.files:
        return '<h4>Diff</h4><p class="none">no change to the workspace</p>'
    counts = f"{len(diff.files)} files, +{diff.added} -{diff.removed} lines"
    return f'<h4>Diff ({_e(counts)})</h4><pre class="text diff">{diff_html(_cut(diff.text, DIFF_SHOWN_CHARS))}</pre>'


def diff_html(text: str) -> str:
    """A unified diff line by line, every line escaped; file, hunk, added and removed lines in classed spans (inside
    a hunk only the first character counts: a removed "-- comment" line is a removal, not a file header)."""
    lines, in_hunk = [], False
    for line in text.split("\n"):
        if line.startswith("diff --git "):
            in_hunk, kind = False, "file"
        elif line.startswith("@@"):
            in_hunk, kind = True, "hunk"
        elif in_hunk:
            kind = {"+": "add", "-": "del"}.get(line[:1])
        else:
            kind = "file" if line.startswith(("--- ", "+++ ")) else None
        lines.append(f'<span class="{kind}">{_e(line)}</span>' if kind else _e(line))
    return "\n".join(lines)
