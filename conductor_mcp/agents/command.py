"""Any program as an agent worker: it reads the prompt on stdin and prints its answer on stdout.

A program of unknown make has no sandbox of its own, so the worker's sandbox is bubblewrap's: it sees the host
read-only (it may use the network and the host's programs), with its private HOME writable and, for
`workspace-write`, the workspace; in its own pid namespace, so nothing it starts outlives it.
"""

from __future__ import annotations

from conductor_mcp.agents.adapter import MESSAGE_MAX_CHARS, AgentAdapter, Parsed, bounded
from conductor_mcp.agents.process import ProcessResult
from conductor_mcp.agents.workspace import Workspace
from conductor_mcp.core.agent_spec import AgentSpec, SandboxMode
from conductor_mcp.runtime import sandbox as isolation

INSTALL_HINT = "a command agent runs under bubblewrap (apt-get install bubblewrap)"


class Command(AgentAdapter):
    cli = "command"

    def argv(self, program: str, spec: AgentSpec, sandbox: SandboxMode, workspace: Workspace) -> list[str]:
        bwrap = isolation.bwrap_path()
        if bwrap is None:
            raise FileNotFoundError(f"bwrap: {INSTALL_HINT}")
        writable = [workspace.home, *([workspace.work] if sandbox == "workspace-write" else [])]
        return [*isolation.host_view_prefix(bwrap, writable, workspace.cwd), program, *spec.command[1:], *spec.args]

    def problems(self, spec: AgentSpec, sandbox: SandboxMode, path: str) -> list[str]:
        return [] if isolation.bwrap_path() else [f"bubblewrap is not installed: {INSTALL_HINT}"]

    def parse(self, result: ProcessResult) -> Parsed:
        return Parsed(final_message=bounded(result.stdout.decode("utf-8", errors="replace").strip(), MESSAGE_MAX_CHARS))

    def version_argv(self, program: str) -> list[str] | None:
        return None
