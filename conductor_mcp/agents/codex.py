"""Codex CLI (`codex exec --json`) as an agent worker.

Codex runs in our bubblewrap (agents/runner.py: the server's state masked, its own pid namespace), and the commands
it runs in its own `--sandbox` nested inside (read-only or workspace-write: writes inside the workspace only, no
network for the commands it runs; checked nested here). Its TMPDIR is in its home: Codex refuses to place the
helper its sandbox needs in a CODEX_HOME under the temporary directory (a state dir under /tmp).

It starts in the workspace (`--cd`), never persists a session (`--ephemeral`), never looks for updates, and reads
its prompt from stdin (`-`). Its HOME and CODEX_HOME are the workspace's private home, so it sees none of the
server user's Codex configuration: the pool's `args` (`-c` overrides) and `env_pass` say everything it needs, such
as its model provider and the variable holding its key.
The commands it runs get only the core variables (HOME, PATH, USER...): never the key it was passed.

Its JSON lines: `item.completed` items of type `agent_message` (the last is the answer) and `command_execution`
(command, aggregated output, exit code); `turn.completed` carries `usage`; `turn.failed` and `error` say why a turn
failed. Codex reports tokens, not cost: the cost comes from the pool's price, when it has one.
"""

from __future__ import annotations

from typing import Any

from conductor_mcp.agents.adapter import AgentAdapter, Parsed, as_int, bounded, json_lines, private_dir, tail
from conductor_mcp.agents.process import ProcessResult
from conductor_mcp.agents.workspace import Workspace
from conductor_mcp.core.agent_records import CommandRun
from conductor_mcp.core.agent_spec import AgentSpec, SandboxMode
from conductor_mcp.core.limits import MAX_COMMANDS, MESSAGE_MAX_CHARS


class Codex(AgentAdapter):
    cli = "codex"
    default_binary = "codex"

    def argv(self, program: str, spec: AgentSpec, sandbox: SandboxMode, workspace: Workspace) -> list[str]:
        model = ["-m", spec.model] if spec.model else []
        return [
            program,
            "exec",
            "--json",
            "--color",
            "never",
            "--skip-git-repo-check",
            "--ephemeral",
            "--sandbox",
            sandbox,
            "--cd",
            str(workspace.cwd),
            "-c",
            "check_for_update_on_startup=false",
            "-c",
            'shell_environment_policy.inherit="core"',
            *model,
            *spec.args,
            "-",
        ]

    def environment(self, workspace: Workspace) -> dict[str, str]:
        # Codex refuses to put its sandbox helper in CODEX_HOME when that is under the temporary directory (a state
        # dir under /tmp); in our sandbox /tmp is private anyway, so its temporary files go to its own home.
        return {
            "CODEX_HOME": str(private_dir(workspace.home / ".codex")),
            "TMPDIR": str(private_dir(workspace.home / "tmp")),
            "NO_COLOR": "1",
        }

    def probe_argv(self, program: str) -> list[str]:
        """A command run in Codex's own sandbox, nested in ours: its helper and its bubblewrap must both work."""
        return [program, "sandbox", "--", "/bin/true"]

    def parse(self, result: ProcessResult) -> Parsed:
        parsed = Parsed()
        for event in json_lines(result.stdout):
            kind = event.get("type")
            if kind == "item.completed" and isinstance(event.get("item"), dict):
                _item(parsed, event["item"])
            elif kind == "turn.completed" and isinstance(event.get("usage"), dict):
                usage = event["usage"]
                parsed.prompt_tokens += as_int(usage.get("input_tokens"))
                parsed.completion_tokens += as_int(usage.get("output_tokens"))
            elif kind in ("turn.failed", "error"):
                parsed.error = bounded(_error_text(event), 2000)
        return parsed


def _item(parsed: Parsed, item: dict[str, Any]) -> None:
    if item.get("type") == "agent_message":
        parsed.final_message = bounded(item.get("text"), MESSAGE_MAX_CHARS)
    elif item.get("type") == "command_execution" and len(parsed.commands) < MAX_COMMANDS:
        code = item.get("exit_code")
        parsed.commands.append(
            CommandRun(
                command=bounded(item.get("command"), 4000),
                exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                output_tail=tail(item.get("aggregated_output")),
            )
        )


def _error_text(event: dict[str, Any]) -> str:
    error = event.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(event.get("message") or error or event)
