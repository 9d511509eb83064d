"""Workspace tools for tool-using model workers: `read` a file, `search` (list or grep) the workspace, `run` a
command in bubblewrap over it. Their OpenAI function schemas, and one dispatcher that answers a call by name.

`read` and `search` run in the server, read-only, and never leave the workspace: a path is taken relative to it,
and one that resolves outside (by `..` or through a symlink) is refused; search never follows symlinks. `run` runs
`sh -c COMMAND` under bubblewrap (runtime/sandbox.py) with the workspace as its working directory, writable
only when the worker's sandbox is `workspace-write`: no network, its own limits of time, memory, processes and
file size, and its output cut to a size. Every answer is text for the model, bounded; a refused or failed call is
an answer too (`error`), so the model can correct itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor_mcp.agents.workspace import Workspace
from conductor_mcp.core.agent_spec import SandboxMode, WorkspaceTool
from conductor_mcp.core.limits import (
    LINE_MAX_CHARS,
    READ_MAX_BYTES,
    READ_MAX_LINES,
    RUN_TIMEOUT_S,
    SEARCH_MAX_RESULTS,
    SEARCH_TIMEOUT_S,
)
from conductor_mcp.runtime import sandbox as isolation

RUN_LIMITS = isolation.Limits(cpu_s=60, memory_mb=2048, file_mb=64, processes=128, tmpfs_mb=256)
_SKIPPED_DIRS = {".git"}


class ToolRefused(Exception):
    """A call the tool will not carry out; the message is the answer the model gets."""


@dataclass(frozen=True)
class ToolOutcome:
    output: str
    error: bool = False


SCHEMAS: dict[str, dict[str, Any]] = {
    "read": {
        "description": "Read a text file of the workspace (a path relative to its root), by lines.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "relative to the workspace root"},
                "start_line": {"type": "integer", "minimum": 1, "description": "first line (1 = the start)"},
                "max_lines": {"type": "integer", "minimum": 1, "maximum": READ_MAX_LINES},
            },
            "required": ["path"],
        },
    },
    "search": {
        "description": "Without a pattern, list the files under a directory of the workspace; with one, find the "
        "lines that match it (an extended regular expression, or plain text with fixed: true).",
        "parameters": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string", "description": "a directory or file, relative to the root (default .)"},
                "fixed": {"type": "boolean", "description": "match the pattern as plain text"},
            },
        },
    },
    "run": {
        "description": "Run a shell command (sh -c) in the workspace root, in a sandbox without network. Returns its "
        "exit status and output.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout_s": {"type": "number", "minimum": 1, "maximum": RUN_TIMEOUT_S},
            },
            "required": ["command"],
        },
    },
}


def tool_schemas(names: list[WorkspaceTool]) -> list[dict[str, Any]]:
    """The OpenAI function tools for these workspace tools, in the order given."""
    return [{"type": "function", "function": {"name": name, **SCHEMAS[name]}} for name in names]


class WorkspaceTools:
    """The tools one worker's step may call over its workspace."""

    def __init__(self, workspace: Workspace, names: list[WorkspaceTool], sandbox: SandboxMode) -> None:
        self.workspace, self.names, self.sandbox = workspace, list(names), sandbox
        self._handlers: dict[str, Callable[[dict[str, Any]], str]] = {
            "read": self._read,
            "search": self._search,
            "run": self._run,
        }

    @property
    def root(self) -> Path:
        """The workspace's tree, every symlink on the way to it resolved (what paths are checked against)."""
        return Path(os.path.realpath(self.workspace.work))

    def schemas(self) -> list[dict[str, Any]]:
        return tool_schemas(self.names)

    async def call(self, name: str, arguments: str) -> ToolOutcome:
        """Answer one call: the tool's output, or why it was refused or failed (in a thread: tools block)."""
        if name not in self.names:
            return ToolOutcome(f"no tool named {name[:100]!r}; the tools are {self.names}", error=True)
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError:
            return ToolOutcome("the arguments are not JSON", error=True)
        if not isinstance(parsed, dict):
            return ToolOutcome("the arguments must be a JSON object", error=True)
        try:
            return ToolOutcome(await asyncio.to_thread(self._handlers[name], parsed))
        except ToolRefused as exc:
            return ToolOutcome(str(exc), error=True)

    # ------------------------------------------------------------------------------------------- the tools

    def _read(self, args: dict[str, Any]) -> str:
        path = self.inside(args.get("path"))
        if not path.is_file():
            raise ToolRefused(f"{_shown(args.get('path'))} is not a file of the workspace")
        with path.open("rb") as file:
            data = file.read(READ_MAX_BYTES + 1)
        if b"\0" in data[:8192]:
            return f"{_shown(args.get('path'))} is a binary file of {path.stat().st_size} bytes"
        start = max(1, _int(args.get("start_line"), 1))
        count = min(READ_MAX_LINES, max(1, _int(args.get("max_lines"), READ_MAX_LINES)))
        lines = data[:READ_MAX_BYTES].decode("utf-8", errors="replace").splitlines()
        shown = lines[start - 1 : start - 1 + count]
        body = "\n".join(f"{start + n:>6}  {line}" for n, line in enumerate(shown)) or "(nothing at that line)"
        notes = []
        if len(lines) > start - 1 + len(shown):
            notes.append(f"more lines follow: read on with start_line {start + len(shown)}")
        if len(data) > READ_MAX_BYTES:
            notes.append(f"only the first {READ_MAX_BYTES} bytes of the file can be read")
        return body + (f"\n[{'; '.join(notes)}]" if notes else "")

    def _search(self, args: dict[str, Any]) -> str:
        target = self.inside(args.get("path") or ".")
        pattern = args.get("pattern")
        if not pattern:
            return self._list(target)
        if not isinstance(pattern, str):
            raise ToolRefused("pattern must be a string")
        flag = "-F" if args.get("fixed") else "-E"
        grep = shutil.which("grep") or "/bin/grep"
        command = [grep, "-rnI", "-m", "20", "--exclude-dir=.git", flag, "-e", pattern, "--", str(target)]
        try:
            done = subprocess.run(command, capture_output=True, timeout=SEARCH_TIMEOUT_S, check=False, env={})
        except subprocess.TimeoutExpired:
            raise ToolRefused(f"the search took over {SEARCH_TIMEOUT_S:.0f}s: narrow the path or the pattern") from None
        if done.returncode > 1:
            raise ToolRefused(f"grep: {done.stderr.decode(errors='replace').strip()[:500]}")
        root = f"{self.root}/"
        lines = done.stdout.decode(errors="replace").splitlines()
        found = [line.removeprefix(root)[:LINE_MAX_CHARS] for line in lines[: SEARCH_MAX_RESULTS + 1]]
        return _capped(found, "matches") if found else "no match"

    def _list(self, target: Path) -> str:
        if target.is_file():
            return str(target.relative_to(self.root))
        found: list[str] = []
        for folder, dirs, files in os.walk(target):  # os.walk does not follow symlinked directories
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
            base = Path(folder).relative_to(self.root)
            found += [str(base / name) for name in sorted(files) if name not in _SKIPPED_DIRS]  # a worktree's .git
            if len(found) > SEARCH_MAX_RESULTS:
                break
        return _capped(found, "files") if found else "no files"

    def _run(self, args: dict[str, Any]) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolRefused("command must be a non-empty string")
        bwrap = isolation.bwrap_path()
        problem = "bubblewrap is not installed" if bwrap is None else isolation.probe(bwrap)
        if bwrap is None or problem is not None:
            raise ToolRefused(f"the run tool needs a working bubblewrap here: {problem}")
        writable = self.sandbox == "workspace-write"
        if writable:
            self.workspace.hand_to_sandbox()
        timeout = min(RUN_TIMEOUT_S, max(1.0, _float(args.get("timeout_s"), RUN_TIMEOUT_S)))
        argv = ["/usr/bin/env", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "/bin/sh", "-c", command]
        done = isolation.run_isolated(
            bwrap, argv, timeout_s=timeout, limits=RUN_LIMITS, workdir=(self.workspace.work, writable)
        )
        status = f"timed out after {timeout:g}s" if done.timed_out else f"exit status {done.exit_code}"
        return f"{status}\n{done.stdout}" + (f"\n[stderr]\n{done.stderr}" if done.stderr else "")

    def inside(self, value: Any) -> Path:
        """The workspace path a model named, or ToolRefused when it is not a path inside the workspace."""
        if not isinstance(value, str) or not value or "\0" in value:
            raise ToolRefused("path must be a non-empty string")
        if os.path.isabs(value):
            raise ToolRefused(f"{_shown(value)}: give a path relative to the workspace root")
        root = str(self.root)
        resolved = os.path.realpath(os.path.join(root, value))
        if resolved != root and not resolved.startswith(root + os.sep):
            raise ToolRefused(f"{_shown(value)} is outside the workspace")
        if not os.path.exists(resolved):
            raise ToolRefused(f"{_shown(value)} does not exist in the workspace")
        return Path(resolved)


def _capped(items: list[str], what: str) -> str:
    shown = items[:SEARCH_MAX_RESULTS]
    more = f"\n[{len(items) - len(shown)}+ more {what}: narrow the search]" if len(items) > len(shown) else ""
    return "\n".join(shown) + more


def _shown(value: Any) -> str:
    return repr(str(value)[:200])


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _float(value: Any, default: float) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
