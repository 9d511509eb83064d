"""Claude Code (`claude -p`) as an agent worker.

The worker's sandbox maps onto Claude Code's own: its Bash tool always runs inside Claude Code's sandbox
(bubblewrap and socat on Linux; `failIfUnavailable`, so a machine without them fails at start instead of running
commands unconfined), which lets commands write only in the workspace. `read-only` also denies writes to the
workspace and offers no editing tools (Bash, Read, Grep, Glob); `workspace-write` adds Edit and Write and accepts
edits. Permission prompts have nobody to answer them, so anything that would ask is denied. No session is kept.

Claude Code itself runs in our bubblewrap (agents/runner.py: the server's state masked, its own pid namespace), so
its sandbox nests in ours. A nested sandbox cannot mount a fresh /proc (the kernel allows that only where the /proc
it sees is fully visible, and bwrap covers parts of ours), so it runs with `enableWeakerNestedSandbox`, which reuses
the /proc it finds: ours, which shows only the agent's own processes. What that setting weakens (commands seeing
the host's processes) our pid namespace already prevents; it also keeps Claude Code from forbidding user namespaces
to its commands, which cannot lift our read-only host view or our masks (they are locked in a nested namespace).

The commands it runs see its environment, API key included. CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=1 would hide the
key, but in 2.1.332 it swaps the sandbox for one under which a command wrote outside the workspace, and it leaves
empty mount points (.env, package.json, ...) in the workspace: checked here, so it stays off. The record masks the
key wherever it shows (the answer, command output, the diff).

Its output is `--output-format stream-json --verbose`: the `system` line says whether the sandbox is on, assistant
turns carry `tool_use` blocks (a Bash command) and the next user turn its `tool_result` ("Exit code N" when it
failed); the last line (`result`) has the answer, `usage` and `total_cost_usd`.
"""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

from conductor_mcp.agents.adapter import AgentAdapter, Parsed, as_int, bounded, json_lines, tail
from conductor_mcp.agents.process import ProcessResult
from conductor_mcp.agents.workspace import Workspace
from conductor_mcp.core.agent_records import CommandRun
from conductor_mcp.core.agent_spec import AgentSpec, SandboxMode
from conductor_mcp.core.limits import MAX_COMMANDS, MESSAGE_MAX_CHARS

READ_TOOLS = "Bash,Read,Grep,Glob"
WRITE_TOOLS = "Bash,Read,Grep,Glob,Edit,Write"
_EXIT_CODE = re.compile(r"^Exit code (\d+)")


class Claude(AgentAdapter):
    cli = "claude"
    default_binary = "claude"

    def argv(self, program: str, spec: AgentSpec, sandbox: SandboxMode, workspace: Workspace) -> list[str]:
        writes = sandbox == "workspace-write"
        confinement: dict[str, Any] = {
            "enabled": True,
            "failIfUnavailable": True,
            "autoAllowBashIfSandboxed": True,
            "allowUnsandboxedCommands": False,
            "enableWeakerNestedSandbox": True,  # ours (agents/runner.py) made its /proc: see the module docstring
        }
        if not writes:
            confinement["filesystem"] = {"denyWrite": [str(workspace.work)]}
        model = ["--model", spec.model] if spec.model else []
        return [
            program,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--no-session-persistence",
            "--permission-prompts",
            "none",
            "--tools",
            WRITE_TOOLS if writes else READ_TOOLS,
            "--allowedTools",
            "Bash,Edit,Write" if writes else "Bash",
            "--permission-mode",
            "acceptEdits" if writes else "default",
            "--settings",
            json.dumps({"sandbox": confinement}),
            *model,
            *spec.args,
        ]

    def environment(self, workspace: Workspace) -> dict[str, str]:
        return {
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }

    def problems(self, spec: AgentSpec, sandbox: SandboxMode, path: str) -> list[str]:
        missing = [tool for tool in ("bwrap", "socat") if shutil.which(tool, path=path) is None]
        if missing:
            return [f"Claude Code's sandbox needs {' and '.join(missing)} (apt-get install bubblewrap socat)"]
        return []

    def parse(self, result: ProcessResult) -> Parsed:
        parsed = Parsed()
        pending: dict[str, str] = {}  # tool_use id -> its Bash command, until its result comes
        for event in json_lines(result.stdout):
            kind = event.get("type")
            if kind == "system" and event.get("subtype") == "init" and event.get("sandbox_enabled") is False:
                parsed.error, parsed.fatal = "Claude Code started without its sandbox", True
            elif kind in ("assistant", "user"):
                _turn(parsed, event.get("message"), pending)
            elif kind == "result" and not parsed.fatal:
                _result(parsed, event)
        return parsed


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _turn(parsed: Parsed, message: Any, pending: dict[str, str]) -> None:
    for block in _blocks(message):
        if block.get("type") == "tool_use" and block.get("name") == "Bash":
            command = (block.get("input") or {}).get("command") if isinstance(block.get("input"), dict) else None
            pending[str(block.get("id"))] = bounded(command, 4000)
        elif block.get("type") == "tool_result" and str(block.get("tool_use_id")) in pending:
            command = pending.pop(str(block.get("tool_use_id")))
            output = _text(block.get("content"))
            failed = _EXIT_CODE.match(output)
            code = int(failed.group(1)) if failed else (None if block.get("is_error") else 0)
            if len(parsed.commands) < MAX_COMMANDS:
                parsed.commands.append(CommandRun(command=command, exit_code=code, output_tail=tail(output)))


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _result(parsed: Parsed, event: dict[str, Any]) -> None:
    parsed.final_message = bounded(event.get("result"), MESSAGE_MAX_CHARS)
    usage = event.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    parsed.prompt_tokens = sum(
        as_int(usage.get(k)) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    parsed.completion_tokens = as_int(usage.get("output_tokens"))
    cost = event.get("total_cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
        parsed.cost_usd = float(cost)
    if event.get("is_error") or event.get("subtype") not in (None, "success"):
        parsed.error = bounded(event.get("result") or event.get("subtype") or "Claude Code reported an error", 2000)
