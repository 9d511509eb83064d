"""Every error conductor-mcp raises on purpose, in one tree, so each door maps them in one place.

    ConductorError                 anything the caller can act on; the message names what is wrong
    ├── SettingsError              a CONDUCTOR_* variable that does not parse (names the variable)
    ├── RequestError               a caller's argument is unusable (names the argument and the limit)
    │   ├── RequestTooLarge        ... because it is over a size limit
    │   └── BudgetExhausted        ... because the server's spending cap is reached
    ├── ModelNotFound              no model (pool) of that name is served
    ├── RunNotFound                no stored run has that id
    ├── StepNotFound               the run has no step of that key
    ├── PoolError                  a pool name or file that cannot be used (names file, worker, field)
    ├── WorkflowError              the conductor's output cannot be turned into a workflow
    ├── ProviderError              every attempt at a model call failed (retries and fallbacks included)
    ├── MalformedResponse          a provider answered 200 with no usable text (retried like a 5xx)
    ├── LocalModelError            the embedded local model cannot be served
    ├── HostUnavailable            the host's model cannot be asked: its MCP session ended or cannot carry requests
    ├── HostDeclined               the host answered a sampling request with an error, or with no text
    ├── StoreError                 the run store cannot be read or written
    ├── SandboxUnavailable         model-written code would run without isolation, and nobody opted in
    ├── DatasetError               a dataset file or row that cannot be used (names the file, row and field)
    ├── WorkspaceError             an agent's workspace cannot be made, read or kept within its budget
    ├── AgentUnavailable           an agent worker cannot run here (its CLI is missing...): names why and the fix
    └── AgentFailed                an agent ran and failed (exit status, deadline, unreadable output); keeps its record

Errors outside this tree are bugs: doors log them and answer with a generic internal error.
"""

from __future__ import annotations

from typing import Any


class ConductorError(Exception):
    """Base of every error in this package that a caller should see and can act on."""


class SettingsError(ConductorError, ValueError):
    """A CONDUCTOR_* setting that does not parse; the message names the variable."""


class RequestError(ConductorError, ValueError):
    """A caller's argument is unusable; the message names the argument and the limit."""


class RequestTooLarge(RequestError):
    """A caller's input is over a size limit; the message names the field, its size and the limit."""


class BudgetExhausted(RequestError):
    """The server's spending cap (CONDUCTOR_SERVER_MAX_TOKENS / _USD) is reached: no new run may start."""


class ModelNotFound(ConductorError, LookupError):
    """A door's model name names no pool on the search path; the message lists the models served."""


class RunNotFound(ConductorError, LookupError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"run_id: no run with id {run_id!r}")
        self.run_id = run_id


class StepNotFound(ConductorError, LookupError):
    def __init__(self, run_id: str, key: str) -> None:
        super().__init__(f"step: run {run_id!r} has no step {key!r}")
        self.run_id, self.key = run_id, key


class PoolError(ConductorError, ValueError):
    """A pool name or file that cannot be used; the message names the file, worker and field."""


class WorkflowError(ConductorError, ValueError):
    """The conductor's output cannot be turned into a workflow; the message names the fault."""


class ProviderError(ConductorError, RuntimeError):
    """Every attempt (retries and fallbacks) failed; `attempts` says what each one got."""

    def __init__(self, message: str, attempts: list[Any]) -> None:
        """`attempts`: the Attempt records (core/records.py) of every try; errors.py imports nothing of the package."""
        super().__init__(message)
        self.attempts = attempts


class MalformedResponse(ConductorError, ValueError):
    """A provider answered 200 with a response that holds no usable text: a provider fault, retried and then
    left for a fallback like a 5xx, so it ends as a failed Attempt and, at worst, a ProviderError."""


class LocalModelError(ConductorError, RuntimeError):
    """The local model cannot be served; the message says why and what to do."""


class HostUnavailable(ConductorError, RuntimeError):
    """The host's model (a `model: host` worker) cannot be asked: the MCP session that asked for the run has ended,
    cannot carry server requests, or no such session is attached to the run (it was resumed by another client)."""


class HostDeclined(ConductorError, RuntimeError):
    """The host answered a sampling request with an error (its user declined it, say) or with no text."""


class StoreError(ConductorError, RuntimeError):
    """The run store cannot be read or written; the message names the file and what to do."""


class SandboxUnavailable(ConductorError, RuntimeError):
    """Model-written code would have to run without isolation, and nobody opted in to that."""


class DatasetError(ConductorError, ValueError):
    """A dataset (evaluation or training) that cannot be used; the message names the file, the row and the field."""


class WorkspaceError(ConductorError, RuntimeError):
    """An agent's workspace cannot be made, read, or kept within the disk budget; the message names the directory."""


class DiskBudgetExceeded(WorkspaceError):
    """The workspaces took more than their disk budget while an agent (or a tool-using model) worked: it was stopped.
    Trying again would only fill the disk again."""


class AgentUnavailable(ConductorError, RuntimeError):
    """An agent worker cannot run on this machine (a missing CLI, a missing sandbox); the message names the fix."""


class AgentFailed(ConductorError, RuntimeError):
    """An agent ran and failed: a non-zero exit, its deadline, output that cannot be read. `record` keeps what it
    did (command line, commands, stderr tail), so a failed step still has its provenance."""

    def __init__(self, message: str, record: Any) -> None:
        """`record`: the step's AgentRecord (core/agent_records.py); errors.py imports nothing of the package."""
        super().__init__(message)
        self.record = record
