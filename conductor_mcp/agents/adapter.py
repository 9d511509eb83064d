"""One interface over the agent CLIs: what each needs to start (its argv and the few variables of its own), what
its output says, and what else it needs on this machine. agents/runner.py runs any of them the same way.

Every value here that came from the agent (its messages, commands, outputs) is untrusted text: it is bounded where
it is read and never run by the server.
"""

from __future__ import annotations

import json
import shlex
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor_mcp.agents.process import ProcessResult
from conductor_mcp.agents.workspace import Workspace
from conductor_mcp.core.agent_records import CommandRun
from conductor_mcp.core.agent_spec import AgentSpec, SandboxMode
from conductor_mcp.core.limits import OUTPUT_TAIL_CHARS
from conductor_mcp.runtime.logs import REDACTED, redact

_SECRET_FLAG = ("key", "token", "secret", "password", "auth")


@dataclass
class Parsed:
    """What an agent's output says."""

    final_message: str = ""
    commands: list[CommandRun] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None  # None: the CLI did not report a cost
    error: str | None = None  # the CLI itself reported a failure
    fatal: bool = False  # the error fails the run whatever it answered (it ran outside its sandbox)


class AgentAdapter(ABC):
    """An agent CLI as a worker."""

    cli: str
    default_binary: str | None = None

    @abstractmethod
    def argv(self, program: str, spec: AgentSpec, sandbox: SandboxMode, workspace: Workspace) -> list[str]:
        """The command line; the prompt goes on stdin."""

    def environment(self, workspace: Workspace) -> dict[str, str]:
        """Variables of its own, beside PATH, HOME and what the pool names."""
        return {}

    @abstractmethod
    def parse(self, result: ProcessResult) -> Parsed:
        """What its stdout says (the process may have failed or been killed)."""

    def problems(self, spec: AgentSpec, sandbox: SandboxMode, path: str) -> list[str]:
        """What else it needs on this machine to run as configured (empty when nothing is missing)."""
        return []

    def version_argv(self, program: str) -> list[str] | None:
        return [program, "--version"]

    def probe_argv(self, program: str) -> list[str]:
        """A cheap round trip through its program, run in its sandbox as a step would run, with no model call
        (what `doctor` runs): by default its version, else a check that its program can be run from inside."""
        return self.version_argv(program) or ["/bin/sh", "-c", 'test -x "$0"', program]


def masked_command_line(argv: list[str], secrets: list[str]) -> str:
    """The argv as one shell line with secrets hidden: known values, key-shaped text, and the value after (or in)
    a flag whose name says it holds a secret (--api-key X, --token=X)."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        text = REDACTED if hide_next else arg
        hide_next = False
        for value in secrets:
            if value and value in text:
                text = text.replace(value, REDACTED)
        if arg.startswith("-") and any(word in arg.lower() for word in _SECRET_FLAG):
            name, equals, _ = arg.partition("=")
            text, hide_next = (f"{name}={REDACTED}", False) if equals else (arg, True)
        shown.append(redact(text))
    return shlex.join(shown)


def json_lines(data: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects among a stream's lines (other lines are skipped: banners, warnings)."""
    for line in data.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                yield value


def bounded(text: Any, limit: int) -> str:
    text = str(text or "")
    return text if len(text) <= limit else f"{text[:limit]}\n[... {len(text) - limit} more characters]"


def tail(text: Any, limit: int = OUTPUT_TAIL_CHARS) -> str | None:
    text = str(text or "")
    if not text:
        return None
    return text if len(text) <= limit else f"[... {len(text) - limit} characters before]\n{text[-limit:]}"


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path
