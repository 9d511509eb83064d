"""Every limit and built-in default, written once: what bounds a request (sizes and counts a caller meets), and
the sizes, counts, waits and intervals the code keeps to, grouped by the module that keeps them. The operator's
knobs are settings (config.py); where a setting's default is one of these, it reads it from here.
tests/core/test_limits.py fails when a module-level number is written anywhere else (tests/core/limits_allowlist.txt
names the numbers that are no limits), and docs/configuration/limits.md lists them all (tools/config_reference.py).
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

# agents/adapter.py
MESSAGE_MAX_CHARS = 64 * 1024
OUTPUT_TAIL_CHARS = 2000
MAX_COMMANDS = 200

# agents/diffs.py
DIFF_SIZE_COUNTED_MAX = 16 * 2**20

# agents/git.py
GIT_TIMEOUT_S = 300.0
GIT_ERROR_TAIL_BYTES = 4096  # a failing git's stderr is read from its end, this much

# agents/loop.py
WORKSPACE_TOOL_OUTPUT_CHARS = 8000
RECORDED_ARGUMENT_CHARS = 4000

# agents/owner.py
DEFAULT_DISK_BUDGET_BYTES = 20 * 2**30
DEFAULT_MAX_AGENTS = 4
DISK_CHECK_S = 1.0  # how often a watcher measures the workspaces at most (less often when measuring takes long)

# agents/process.py
STDOUT_MAX_BYTES = 32 * 2**20
STDERR_TAIL_BYTES = 64 * 1024
KILL_GRACE_S = 2.0
SETTLE_S = 5.0  # for the readers and the writer to stop once the process has ended (they do not wait on it)

# agents/runner.py
VERSION_TIMEOUT_S = 30.0

# agents/tools.py
READ_MAX_LINES = 400
READ_MAX_BYTES = 256 * 1024
SEARCH_MAX_RESULTS = 200
SEARCH_TIMEOUT_S = 20.0
LINE_MAX_CHARS = 300
RUN_TIMEOUT_S = 60.0

# agents/workspace.py
DIFF_MAX_BYTES = 256 * 1024
PATCH_MAX_BYTES = 64 * 1024 * 1024

# cli/install.py
HOST_TOOL_TIMEOUT_S = 600  # a tool answers within its wait_seconds (45 s unless the calling model asks for more)
HOST_STARTUP_TIMEOUT_S = 60  # Codex waits 10 s by default: short for importing litellm on a busy 2-core machine

# core/agent_spec.py
AGENT_TIMEOUT_S = 900.0

# core/choice.py
MAX_CHOSEN = 64  # ids in one list: a pool is a handful of workers

# core/pool.py
MAX_DOCUMENT_DEPTH = 32
MAX_DOCUMENT_VALUES = 100_000

# core/trace_context.py
MAX_TRACESTATE_CHARS = 512  # W3C Trace Context: 32 list members; platforms should propagate at least 512 chars

# doors/http/app.py
GRACEFUL_SHUTDOWN_S = 5  # open event streams (viewer pages, OpenAI streams) must not hold a stop forever

# doors/http/auth.py
MIN_TOKEN_CHARS = 32
MIN_DISTINCT_CHARS = 10
AUTH_MAX_FAILURES = 20
AUTH_WINDOW_S = 60.0
AUTH_MAX_TRACKED = 10_000  # client addresses remembered; past it, the quietest are forgotten

# doors/http/guards.py
BODY_TIMEOUT_S = 60.0
# uvicorn closes a connection idle this long after a response (the header timeout, 10 s by default, ends one too).
# Longer than httpx's keep-alive expiry (5 s; the MCP SDK's client): when both were 5 s, a client could send its
# POST on a connection the server was closing, and the call failed with a ReadError.
KEEP_ALIVE_S = 10
MAX_CONNECTIONS = 1000  # and never more than half the process's descriptors

# doors/mcp/results.py
RESULT_MARKDOWN_CHARS = 30_000  # characters, about 8,000 tokens
ANSWER_LIMIT_CHARS = 40_000  # about 10,000 tokens: with the step summaries a result stays under ~20,000 tokens
OUTPUT_EXCERPT_CHARS = 300
INSTRUCTION_EXCERPT_CHARS = 300

# doors/mcp/sampling.py
HOST_SAMPLING_MAX_TOKENS = 1024
MAX_REPORTED_TOKENS = 10_000_000  # a client's own usage report is believed up to this

# doors/mcp/server.py
DEFAULT_WAIT_S = 45.0  # below the ~60 s at which Claude Desktop and older Codex versions cut a tool call
MAX_WAIT_S = 3600.0

# doors/viewer/markdown.py
MAX_RENDERED_CHARS = 200_000  # past this an output is shown as text only: rendering it would cost the server

# doors/viewer/routes.py
CODE_TTL_S = 300.0
VIEWER_PAGE_SIZE = 50

# doors/viewer/sessions.py
SESSION_TTL_S = 8 * 3600

# doors/viewer/work.py
VIEWER_SHOWN_CHARS = 4000
DIFF_SHOWN_CHARS = 200_000

# engine/workspace_steps.py
DEADLINE_MARGIN_S = 5.0  # an agent's own deadline comes before the step's, so its stderr and diff are kept
STDERR_IN_ERROR_CHARS = 1500

# models/local.py
LOCAL_STARTUP_TIMEOUT_S = 90.0
LOCAL_EXIT_WAIT_S = 3.0  # how long a server that stopped answering gets to finish dying before it is called alive
LOCAL_CONTEXT_TOKENS = 4096  # each slot's

# models/http_errors.py
ERROR_BODY_CHARS = 2000  # of an error status's body, kept in the attempt's message (the server's text: untrusted)

# models/local_exit.py
TAIL_LINES = 5
TAIL_LINE_CHARS = 240

# models/local_runtime.py
PARENT_CHECK_S = 1.0

# models/retry.py
BACKOFF_MAX_S = 20.0
DEFAULT_CONCURRENCY = 16  # concurrent calls per provider endpoint; a pool entry's max_concurrency overrides it

# models/sim_tools.py
QUOTED_RESULT_CHARS = 200

# runs/active.py
CANCEL_GRACE_S = 10.0
COALESCE_S = 0.01  # a coalescing follower gets an event this late, with the ones that follow it this closely

# runs/cancels.py
CANCEL_POLL_S = 1.0  # how often a process looks for cancellations asked for by another process

# runs/follow.py
WATCH_INTERVAL_S = 0.5

# runs/postgres.py
CONNECT_TIMEOUT_S = 10
STORE_RETRY_S = 30.0  # how long a call waits out a database that went away (a fast restart takes a second or two)
ATTEMPT_WAIT_S = 2.0  # one attempt's wait for a pooled connection

# runs/postgres_live.py
LIVE_MESSAGE_CHARS = 2000  # NOTIFY payloads stop at 8000 bytes; an event's message is a line
RETAKE_GRACE_S = 5.0  # how long a waiter gives an owner to take its lease again before believing it interrupted
OWNER_CHECK_S = 2.0  # how often a remote waiter checks that the run's owner still holds its lease

# runtime/loop.py
# A full collection after every 1,000 collections of the middle generation, not Python's 10. A run in flight keeps
# ~330 tracked objects alive (its coroutines, events, records): with 1,000 runs in flight a full collection walks
# ~330k objects in 0.17-0.30 s while every run waits, and finds next to nothing to free (0-450 objects). Measured
# with tools/bench_load.py's hold (1,000 runs in flight, 3 rounds), p99 overhead: 1,311 ms with neither the freeze
# nor this; with the freeze, 257 ms at 100 (a full collection still landed in a round) and 10 ms at 1,000, RSS +1.7%.
FULL_COLLECTION_EVERY = 1000
# A young collection once 7,000 more tracked objects are alive than at the last one, not Python's 700: an HTTP run's
# records, messages and wire objects are mostly freed by their counts, but ~700 outlive each run for a while, so
# the default collected every 2-3 runs and each time walked what the runs in flight hold. Measured on the server
# (gc.callbacks, 300 HTTP runs, 8 at a time): 0.32 ms of CPU per run in collections at 700 (130 young, 12 middle),
# 0.02 ms at 7,000 (2 young, 0 middle, the same cycles freed).
YOUNG_COLLECTION_EVERY = 7000

# runtime/sandbox.py
AGENT_UID = 1000  # an agent's uid in its own user namespace when the caller is root (it stays root on the host)

# service/catalogue.py
MAX_POOL_FILE_BYTES = 1 << 20

# service/files.py
READ_TIMEOUT_S = 10.0  # one file; a disk this slow is broken, or the file is not a file
MAX_STUCK_READS = 8  # reads past their deadline whose threads have not returned yet: beyond, refuse new ones

# service/patches.py
MAX_FILES_LISTED = 100
METADATA_VALUE_CHARS = 512  # OpenAI's limit on a metadata value

# telemetry/traces.py
MAX_CONTENT_CHARS = 32_000  # of one span attribute holding prompt or answer text (opt-in)
MAX_ERROR_CHARS = 500  # of an error's text in a span's status (opt-in)

# doors/mcp/app.py
APP_WAIT_S = 30.0  # one wait for a change stays well below every host's tool-call timeout
APP_TEXT_CHARS = 20_000  # per output, answer, instruction or task shown; the whole is a resources/read away

# models/local_runtime.py
LOCAL_SLOTS = 2  # local.CONDUCTOR_SLOT and local.WORKER_SLOT

# models/local_slots.py
SLOT_IO_TIMEOUT_S = 10.0  # saving or restoring the conductor's slot: 12-15 MB on local disk

# learning/pilot.py
PILOT_ANSWER_TOKENS = 12  # a pilot answer is a number, a word or a date
PILOT_ANSWER_CHARS = 200  # a model's completion is untrusted: only its opening is read


def max_calls(steps: int) -> int:
    """The call cap of a run allowed `steps` steps: it bounds recursion and re-planning, not the workflow."""
    return CALLS_PER_STEP * steps
