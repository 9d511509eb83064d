"""Every limit a caller meets, written once. Requests, doors, the engine and the store read them from here.

Limits are sizes and counts that bound what one request may ask for or store; the operator's knobs (deadlines,
budgets, intervals) are settings (config.py), not limits.
"""

from __future__ import annotations

MAX_STEPS = 20  # steps in one workflow (a pool's max_steps and a request's max_steps stay within it)
CALLS_PER_STEP = 2  # a run may make this many step and recursive conductor calls per step it may write
MAX_TASK_CHARS = 100_000
MAX_FEEDBACK_CHARS = MAX_TASK_CHARS
MAX_CONTEXT_CHARS = 400_000  # the caller's context with the files it names
MAX_FILES = 50  # files one request may name
MAX_FILE_BYTES = 1_000_000  # one named file
MAX_TOOLS = 128  # the client's function tools on one request
MAX_TOOLS_CHARS = 200_000  # their definitions, as JSON (Codex sends ~20 KB)
MAX_TOOL_OUTPUT_CHARS = MAX_TASK_CHARS  # one tool result the client sends back; a longer one is cut, with a note
MAX_SEEN_OUTPUT_CHARS = 48_000  # a step's output as later steps see it (the cut is recorded)
MAX_RUNS_LISTED = 100  # runs in one listing (a page of the viewer, the runs tool, the CLI)
MAX_MCP_MESSAGE_BYTES = 4 * 1024 * 1024  # one MCP message, on stdio and over HTTP (the SDK's own cap)
MAX_BODY_BYTES = 8 * 1024 * 1024  # an HTTP request body on the OpenAI door: a long Codex history fits
MAX_FORM_BODY_BYTES = 16 * 1024  # the viewer's sign-in form: a token and a target path
MAX_OTHER_BODY_BYTES = 64 * 1024  # every other HTTP route takes no body


def max_calls(steps: int) -> int:
    """The call cap of a run allowed `steps` steps: it bounds recursion and re-planning, not the workflow."""
    return CALLS_PER_STEP * steps
