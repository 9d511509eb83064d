"""Any program as an agent worker: it reads the prompt on stdin and prints its answer on stdout.

A program of unknown make has no sandbox of its own: bubblewrap's, which every agent runs in (agents/runner.py),
is its only one.
"""

from __future__ import annotations

from conductor_mcp.agents.adapter import AgentAdapter, Parsed, bounded
from conductor_mcp.agents.process import ProcessResult
from conductor_mcp.agents.workspace import Workspace
from conductor_mcp.core.agent_spec import AgentSpec, SandboxMode
from conductor_mcp.core.limits import MESSAGE_MAX_CHARS


class Command(AgentAdapter):
    cli = "command"

    def argv(self, program: str, spec: AgentSpec, sandbox: SandboxMode, workspace: Workspace) -> list[str]:
        return [program, *spec.command[1:], *spec.args]

    def parse(self, result: ProcessResult) -> Parsed:
        return Parsed(final_message=bounded(result.stdout.decode("utf-8", errors="replace").strip(), MESSAGE_MAX_CHARS))

    def version_argv(self, program: str) -> list[str] | None:
        return None
