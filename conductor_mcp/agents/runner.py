"""Run an agent worker in its workspace, the same way whichever CLI it is, and say why one cannot run here.

Every agent, whatever its CLI, runs under our bubblewrap (isolation.host_view_prefix): it sees the host read-only
but none of the server's state (its state dir and the other workspaces are masked), its workspace (writable for
`workspace-write`) and private HOME, and what its command line needs even under /tmp (its program, the venv or
package holding it, the paths it names, the repository's git directory). It has its own user and pid namespaces,
so every process it starts ends with it. A CLI's own sandbox (Codex's, Claude Code's) runs nested inside ours.

The agent's environment is PATH (the server's, to find its programs), a private HOME inside its workspace, LANG,
the variables its pool entry passes (`env_pass`: their values are registered as secrets, so no log, record or
transcript shows them) and fixed ones (`env`), and the few its adapter needs. Nothing else of the server's
environment reaches it. Its record keeps the command line (secrets masked), the CLI's version, exit status,
duration, the commands it ran, its tokens and cost, and, when it failed, its stderr's tail.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from conductor_mcp.agents.adapter import AgentAdapter, Parsed, masked_command_line, private_dir, tail
from conductor_mcp.agents.claude import Claude
from conductor_mcp.agents.codex import Codex
from conductor_mcp.agents.command import Command
from conductor_mcp.agents.process import ProcessResult, run_process
from conductor_mcp.agents.workspace import Workspace
from conductor_mcp.config import environment_value
from conductor_mcp.core.agent_records import AgentRecord
from conductor_mcp.core.agent_spec import AgentSpec, SandboxMode
from conductor_mcp.core.limits import VERSION_TIMEOUT_S
from conductor_mcp.core.pool import WorkerSpec
from conductor_mcp.errors import AgentFailed, AgentUnavailable
from conductor_mcp.runtime import sandbox as isolation
from conductor_mcp.runtime.logs import get_logger, redact, redact_values, register_secret

log = get_logger(__name__)

INSTALL_HINT = "agents run under bubblewrap (apt-get install bubblewrap)"
ADAPTERS: dict[str, AgentAdapter] = {adapter.cli: adapter for adapter in (Codex(), Claude(), Command())}
_CLAIM = re.compile(
    r"(?:^|[.!?]\s+|\bI(?:'ve| have)?\s+)(?:created|wrote|written|added|modified|updated|changed|edited|fixed|"
    r"implemented|renamed|deleted|removed)\b[^\n]{0,60}",
    re.IGNORECASE | re.MULTILINE,
)
_versions: dict[str, str | None] = {}


def _agent(worker: WorkerSpec) -> tuple[AgentSpec, AgentAdapter]:
    if worker.agent is None:
        raise ValueError(f"worker {worker.id!r} is not an agent worker")
    return worker.agent, ADAPTERS[worker.agent.cli]


def _search_path() -> str:
    return environment_value("PATH") or os.defpath


def program(worker: WorkerSpec) -> str:
    """The agent's program as a path, or AgentUnavailable naming what is missing."""
    spec, adapter = _agent(worker)
    name = spec.command[0] if spec.command else (spec.binary or adapter.default_binary or "")
    found = shutil.which(name, path=_search_path())
    if found is None:
        where = "does not exist or is not executable" if "/" in name else "is not on PATH"
        raise AgentUnavailable(f"worker {worker.id!r}: the {spec.cli} agent's program {name!r} {where}")
    return os.path.abspath(found)


def unavailable_reason(worker: WorkerSpec) -> str | None:
    """Why this agent worker cannot run here (None when it can): what `doctor` and `pools` say."""
    spec, adapter = _agent(worker)
    try:
        program(worker)
    except AgentUnavailable as exc:
        return str(exc)
    missing = [name for name in spec.env_pass if environment_value(name) is None]
    problems = [] if isolation.bwrap_path() else [f"bubblewrap is not installed: {INSTALL_HINT}"]
    problems += adapter.problems(spec, worker.sandbox, _search_path())
    problems += [f"environment variable {name} (agent.env_pass) is not set" for name in missing]
    return f"worker {worker.id!r}: {'; '.join(problems)}" if problems else None


def agent_environment(worker: WorkerSpec, workspace: Workspace) -> tuple[dict[str, str], list[str]]:
    """The agent's whole environment, and the secret values in it (to mask wherever they might show)."""
    spec, adapter = _agent(worker)
    passed = {name: value for name in spec.env_pass if (value := environment_value(name)) is not None}
    for value in passed.values():
        register_secret(value)
    env = {"PATH": _search_path(), "HOME": str(private_dir(workspace.home)), "LANG": "C.UTF-8"}
    return {**spec.env, **passed, **adapter.environment(workspace), **env}, list(passed.values())


async def cli_version(path: str, adapter: AgentAdapter, env: dict[str, str], workspace: Workspace) -> str | None:
    """What the CLI says its version is (asked once per program and process)."""
    argv = adapter.version_argv(path)
    if argv is None:
        return None
    if path not in _versions:
        try:
            done = await run_process(argv, cwd=workspace.home, env=env, stdin=b"", timeout_s=VERSION_TIMEOUT_S)
        except OSError:
            return None
        text = done.stdout.decode("utf-8", errors="replace").strip().splitlines()
        _versions[path] = text[0][:200] if done.exit_status == 0 and text else None
    return _versions[path]


async def run_agent(
    worker: WorkerSpec, prompt: str, workspace: Workspace, timeout_s: float | None = None
) -> AgentRecord:
    """Run the agent on `prompt` in `workspace` until it ends or its deadline (the worker's `timeout_s` unless
    given). Returns its record; raises AgentUnavailable (it cannot start) or AgentFailed (it ran and failed,
    with its record). Cancellation kills every process it started, then propagates."""
    spec, adapter = _agent(worker)
    path = program(worker)
    env, secrets = agent_environment(worker, workspace)
    version = await cli_version(path, adapter, env, workspace)
    try:
        argv = sandboxed(adapter.argv(path, spec, worker.sandbox, workspace), path, spec, worker.sandbox, workspace)
    except FileNotFoundError as exc:
        raise AgentUnavailable(f"worker {worker.id!r}: {exc}") from None
    deadline = timeout_s if timeout_s is not None else worker.timeout_s
    log.info("agent_start", worker=worker.id, cli=spec.cli, workspace=workspace.id, sandbox=worker.sandbox)
    git_dir = workspace.git_dir_entries()
    try:
        result = await run_process(argv, cwd=workspace.cwd, env=env, stdin=prompt.encode(), timeout_s=deadline)
    except (FileNotFoundError, PermissionError) as exc:
        raise AgentUnavailable(f"worker {worker.id!r}: cannot start {path}: {exc.strerror}") from None
    finally:
        if tidied := workspace.tidy_git_dir(git_dir):
            log.info("agent_mount_points_removed", worker=worker.id, paths=tidied)
    record = _record(worker, adapter, result, masked_command_line(argv, secrets), version, deadline)
    log.info(
        "agent_end",
        worker=worker.id,
        exit_status=record.exit_status,
        seconds=record.latency_s,
        commands=len(record.commands),
        error=record.error,
    )
    if record.error is not None:
        raise AgentFailed(f"worker {worker.id!r}: {record.error}", record)
    return record


async def round_trip(worker: WorkerSpec, workspace: Workspace, timeout_s: float = VERSION_TIMEOUT_S) -> str | None:
    """Run the agent's probe (AgentAdapter.probe_argv) in `workspace` as a step would run it: why it failed, or
    None when it worked. Raises AgentUnavailable when it cannot start at all."""
    spec, adapter = _agent(worker)
    path = program(worker)
    env, _ = agent_environment(worker, workspace)
    try:
        argv = sandboxed(adapter.probe_argv(path), path, spec, worker.sandbox, workspace)
        result = await run_process(argv, cwd=workspace.cwd, env=env, stdin=b"", timeout_s=timeout_s)
    except OSError as exc:
        raise AgentUnavailable(f"worker {worker.id!r}: cannot start {path}: {exc}") from None
    if result.timed_out:
        return f"its probe did not end within {timeout_s:g}s"
    if result.exit_status != 0:
        said = _stderr_tail(result) or result.stdout.decode("utf-8", errors="replace").strip()[-500:]
        return f"its probe exited with status {result.exit_status}" + (f": {said.strip()}" if said else "")
    return None


def sandboxed(argv: list[str], program: str, spec: AgentSpec, sandbox: SandboxMode, workspace: Workspace) -> list[str]:
    """`argv` under our bubblewrap, as the module docstring says. Raises FileNotFoundError without bubblewrap."""
    bwrap = isolation.bwrap_path()
    if bwrap is None:
        raise FileNotFoundError(f"bwrap: {INSTALL_HINT}")
    own = [(workspace.home, True), (workspace.work, sandbox == "workspace-write")]
    named = [Path(arg) for arg in (*spec.command[1:], *spec.args) if os.path.isabs(arg)]
    readable = [*program_dirs(program), *named]
    if workspace.repo is not None:  # git in the worktree reads the repository's objects and its worktree entry
        readable.append(workspace.repo.common_dir)
    prefix = isolation.host_view_prefix(bwrap, own=own, readable=readable, hidden=workspace.hidden, chdir=workspace.cwd)
    return [*prefix, *argv]


def program_dirs(program: str) -> list[Path]:
    """Where a program lives: itself and, when it sits in a bin/ directory, the prefix holding that (a venv,
    node_modules, an install root), for its path as named and as its links resolve (a venv's python is a link out
    of the venv, node_modules/.bin/codex one into its package)."""
    found = []
    for path in (Path(os.path.abspath(program)), Path(os.path.realpath(program))):
        found += [path, *([path.parent.parent] if path.parent.name in ("bin", ".bin") else [])]
    return found


def _record(
    worker: WorkerSpec, adapter: AgentAdapter, result: ProcessResult, line: str, version: str | None, deadline: float
) -> AgentRecord:
    parsed = _redacted(adapter.parse(result))
    cost, reported = (parsed.cost_usd, True) if parsed.cost_usd is not None else (_priced(worker, parsed), False)
    error = _failure(result, parsed, deadline)
    return AgentRecord(
        cli=adapter.cli,
        version=version,
        command_line=line,
        exit_status=result.exit_status,
        timed_out=result.timed_out,
        final_message=parsed.final_message,
        commands=parsed.commands,
        prompt_tokens=parsed.prompt_tokens,
        completion_tokens=parsed.completion_tokens,
        cost_usd=cost,
        cost_reported=reported,
        latency_s=result.duration_s,
        error=error,
        stderr_tail=_stderr_tail(result) if error else None,
        warning=_commands_failed(parsed),
    )


def _commands_failed(parsed: Parsed) -> str | None:
    """A warning when it ran commands and none of them worked (a sandbox that refused them all, say)."""
    if parsed.commands and all(command.exit_code != 0 for command in parsed.commands):
        return f"every command it ran failed or was refused ({len(parsed.commands)})"
    return None


def change_warning(record: AgentRecord, changed: bool) -> str | None:
    """The record's warning once its workspace's change is known: its answer speaks of a change (in the first person
    or as an opening verb: "I created...", "Wrote x.py") and the workspace holds none."""
    if changed or record.warning is not None:
        return record.warning
    claim = _CLAIM.search(record.final_message)
    if claim is None:
        return None
    said = claim.group(0).lstrip(".!? ").strip()
    return f"its answer speaks of a change ({said!r}) but its workspace holds none"


def _redacted(parsed: Parsed) -> Parsed:
    """The agent's texts with known secret values masked: it may have read a key, and said or printed it."""
    parsed.final_message = redact_values(parsed.final_message)
    for command in parsed.commands:
        command.command = redact_values(command.command)
        command.output_tail = redact_values(command.output_tail) if command.output_tail else None
    return parsed


def _stderr_tail(result: ProcessResult) -> str | None:
    text = tail(result.stderr_tail.decode("utf-8", errors="replace"))
    return redact(text) if text else None


def _priced(worker: WorkerSpec, parsed: Parsed) -> float:
    """The cost from the pool's price, for a CLI that reports tokens only."""
    if worker.price is None:
        return 0.0
    price = worker.price
    return (parsed.prompt_tokens * price.input_per_mtok + parsed.completion_tokens * price.output_per_mtok) / 1e6


def _failure(result: ProcessResult, parsed: Parsed, deadline: float) -> str | None:
    """Why the run counts as failed, or None: killed at its deadline, a non-zero exit, a fatal error, an error the
    CLI reported with no answer, or no answer at all."""
    if result.timed_out:
        return f"killed at its deadline of {deadline:g}s"
    if result.exit_status != 0:
        return f"exited with status {result.exit_status}" + (f": {parsed.error}" if parsed.error else "")
    if parsed.error and (parsed.fatal or not parsed.final_message):
        return parsed.error
    if not parsed.final_message:
        return "ended without an answer" + (
            " (its output was cut at its size limit)" if result.stdout_truncated else ""
        )
    return None
