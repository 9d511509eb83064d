"""`run --verbose`: where the command's seconds went, so a slow run on the embedded model can be told apart:
our start-up and imports, starting the model server, llama.cpp's prompt and generated tokens (its /metrics,
read before and after the run), and the rest of the run, which is ours. Time after the answer (closing, exit)
is outside any process's view of itself: tools/bench_local.py measures it from outside."""

from __future__ import annotations

import os
import time
from pathlib import Path

from conductor_mcp.models import local, local_slots

_TICKS = os.sysconf("SC_CLK_TCK")


def process_age_s() -> float:
    """Seconds since this process started (/proc): the interpreter's start-up and the CLI's imports so far."""
    started = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / _TICKS
    return float(Path("/proc/uptime").read_text().split()[0]) - started


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _rate(tokens: float, seconds: float) -> str:
    """Tokens per second, which say what this CPU can do (a run's token counts vary with its sampling)."""
    return f" at {tokens / seconds:.0f}/s" if tokens and seconds > 0 else ""


class Breakdown:
    """Marks taken through one `run`, and the lines they make."""

    def __init__(self, servers: local.LocalServers, model: str = local.DEFAULT_MODEL) -> None:
        self.before = process_age_s()
        self.started = time.perf_counter()
        self.model = model
        self.registry = servers
        self.imports_s = self.run_started = 0.0
        self.counters: dict[str, float] = {}
        self.server_cpu = 0.0

    def _server(self) -> tuple[dict[str, float], float]:
        running = self.registry.running(self.model)
        if running is None:
            return {}, 0.0
        return local_slots.counters(running.root) or {}, cpu_s(running.pid)

    def imported(self) -> None:
        """The run's own imports are done; the run starts (a resident server's counters are read here)."""
        self.imports_s = time.perf_counter() - self.started
        self.counters, self.server_cpu = self._server()
        self.run_started = time.perf_counter()

    def lines(self) -> list[str]:
        """The breakdown, once the run has its result."""
        run_s = time.perf_counter() - self.run_started
        after, server_cpu = self._server()
        delta = {key: value - self.counters.get(key, 0.0) for key, value in after.items()}
        began, ready = self.registry.starts.get(self.model, (0.0, 0.0))
        waited = max(0.0, ready - max(began, self.run_started))  # a prestarted server loads during the imports
        prompt_s, generated_s = delta.get("prompt_seconds_total", 0.0), delta.get("tokens_predicted_seconds_total", 0.0)
        evaluated, cached = delta.get("prompt_tokens_total", 0.0), delta.get("prompt_tokens_cached_total", 0.0)
        generated = delta.get("tokens_predicted_total", 0.0)
        rows = [
            ("start-up before the run", self.before, "interpreter and the CLI's imports"),
            ("imports for the run", self.imports_s, "the service, the engine, the model clients"),
            ("model server start", ready - began, "load the model, restore the conductor's slot" if ready else "none"),
            ("  the run waited for it", waited, "the rest of its start overlapped the imports"),
            ("prompt tokens", prompt_s, f"{evaluated:.0f} evaluated{_rate(evaluated, prompt_s)}, {cached:.0f} cached"),
            ("generated tokens", generated_s, f"{generated:.0f} tokens{_rate(generated, generated_s)}"),
            ("the rest of the run", run_s - waited - prompt_s - generated_s, "ours: planning, steps, store, HTTP"),
        ]
        if not after:
            rows[4:6] = [("model tokens", 0.0, "no llama.cpp counters (not the local pool, or an older server)")]
        out = ["conductor-mcp: where the time went (wall seconds)"]
        out += [f"  {name:<24} {seconds:6.2f}  {note}" for name, seconds, note in rows]
        total = self.before + self.imports_s + run_s
        cpu = f"CPU: this process {time.process_time():.2f} s, model server {server_cpu - self.server_cpu:.2f} s"
        out.append(f"  {'to the answer':<24} {total:6.2f}  {cpu}")
        return out
