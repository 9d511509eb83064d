"""What to tell a user whose embedded model server died: how it ended, why that usually happens, what to do,
and the last lines it wrote. Without this a crash shows only as connection errors from the HTTP client."""

from __future__ import annotations

import signal
from pathlib import Path

from conductor_mcp.core.limits import TAIL_LINE_CHARS, TAIL_LINES

REINSTALL = "pip install --force-reinstall --no-cache-dir xllamacpp"

_ADVICE = {
    "SIGILL": (
        "SIGILL is an illegal instruction: this llama.cpp build uses CPU instructions this machine does not "
        "execute (a build made with -march=native on a CPU that advertises AMX or AVX-512 inside a VM or sandbox "
        "that does not grant them, or a CPU without AVX2). Fix: reinstall the prebuilt AVX2 wheel with "
        f"`{REINSTALL}`; on a CPU without AVX2, serve the model with an OpenAI-compatible server built for it "
        "and name that server's api_base in a pool. Restarting it would crash again, so it is not restarted."
    ),
    "SIGKILL": "SIGKILL from outside, often the kernel's out-of-memory killer (see `dmesg`).",
    "SIGSEGV": "A crash inside llama.cpp; the log below may say where.",
    "SIGBUS": "A crash inside llama.cpp, often a model file that changed or was cut while in use.",
    "SIGABRT": "llama.cpp aborted; the log below says why.",
}


def signal_name(returncode: int) -> str | None:
    """The signal that ended a process, from its Popen return code (negative for a signal), else None."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def is_deterministic(returncode: int) -> bool:
    """A death that a restart would only repeat (the same binary on the same CPU)."""
    return signal_name(returncode) == "SIGILL"


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of a server's log (its stdout and stderr), each cut short, joined with ' | '."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [line[:TAIL_LINE_CHARS] for line in text.strip().splitlines()[-lines:]]
    return " | ".join(kept) or "(empty log)"


def exit_diagnosis(name: str, returncode: int, log_path: Path) -> str:
    """One message for a server that ended: how, why that happens and the fix, then its last log lines."""
    signame = signal_name(returncode)
    how = f"was killed by {signame}" if signame else f"exited with status {returncode}"
    advice = _ADVICE.get(signame or "", "")
    return (
        f"the embedded {name} model server (llama.cpp) {how}. {advice}".rstrip()
        + f" Last lines of its log ({log_path}): {tail(log_path)}"
    )


def gone_diagnosis(name: str, pid: int, log_path: Path) -> str:
    """A resident server (started by another process, so its exit status is not ours to read) that is gone."""
    return (
        f"the resident embedded {name} model server (pid {pid}) is gone; `conductor-mcp local up` starts a new "
        f"one. Last lines of its log ({log_path}): {tail(log_path)}"
    )
