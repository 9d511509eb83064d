"""What a pool file says about an agent worker (an agent CLI run in its own workspace) and about the workspace
tools a model worker may be given. Validation only: conductor_mcp/agents/ runs them."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
AGENT_ENV = frozenset({"PATH", "HOME", "CODEX_HOME"})  # set by the adapter itself, never by a pool

AgentCli = Literal["codex", "claude", "command"]
SandboxMode = Literal["read-only", "workspace-write"]
WorkspaceTool = Literal["read", "search", "run"]


class AgentSpec(BaseModel):
    """An agent CLI as a worker: which program, with what, and which of the server's variables it may see. What
    it may do to its workspace is the worker's `sandbox`; its deadline is the worker's `timeout_s`."""

    model_config = ConfigDict(extra="forbid")
    cli: AgentCli = Field(description="'codex' (Codex CLI), 'claude' (Claude Code) or 'command' (any program)")
    binary: str | None = Field(
        default=None, description="codex and claude: the program, a name on PATH or a path; default: the CLI's name"
    )
    command: list[str] = Field(
        default_factory=list,
        description="command agents: the program and its arguments; the prompt arrives on stdin, the answer is stdout",
    )
    model: str | None = Field(default=None, description="the model the CLI is told to use (codex -m, claude --model)")
    args: list[str] = Field(default_factory=list, description="more arguments, after the adapter's own")
    env_pass: list[str] = Field(
        default_factory=list, description="names of the server's environment variables the agent gets (its API keys)"
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="fixed environment values the agent gets (not secrets: they are in the pool)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> AgentSpec:
        if self.cli == "command":
            if not self.command or not self.command[0]:
                raise ValueError("a command agent needs 'command': the program and its arguments")
            if self.binary or self.model:
                raise ValueError("a command agent takes its program from 'command' (no 'binary' or 'model')")
        elif self.command:
            raise ValueError(f"'command' is for command agents; a {self.cli} agent takes 'binary' and 'args'")
        for name in [*self.env_pass, *self.env]:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name in AGENT_ENV:
                raise ValueError(f"{name} is set by the server for every agent (a private HOME, the server's PATH)")
        both = sorted(set(self.env_pass) & set(self.env))
        if both:
            raise ValueError(f"{both} are both passed from the server (env_pass) and fixed (env): choose one")
        return self
