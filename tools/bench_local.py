"""The embedded model as a user meets it: `conductor-mcp run "<README question>"` on the local pool, timed from
the command to its answer on stdout and to its exit, cold (the command starts the model server) and resident
(`conductor-mcp local up` beforehand), median of N, beside the targets.

CPU seconds are reported too, since load from other work on the machine inflates wall time far more than CPU: the
command's own user+system time together with the children it waited for (wait4's usage, so a managed model server
counts), plus, in resident mode, what the resident server spent during the run (its /proc stat before and after).
`--source DIR` (repeatable) runs the command from other checkouts of the package, interleaved run by run, so a
before and an after are measured side by side under the same load.

    python tools/bench_local.py [--runs 3] [--source DIR ...] [--modes cold,resident]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

README_TASK = "What is the capital of France?"
TARGETS_S = {"resident": 3.0, "cold": 8.0}  # wall, command to exit, on a quiet 2-core machine (issue #40)
MODEL = "gemma3-270m"
RUN_TIMEOUT_S = 300.0
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    answer_s: float  # the first line on stdout: the answer
    summary_s: float  # the "run ended" line on stderr: everything our run's clock sees
    exit_s: float
    cpu_s: float  # the command and the children it waited for
    server_cpu_s: float  # a resident server's CPU during the run (0 for cold: it is in cpu_s)


def _watch(stream: object, marks: list[float], started: float, needle: str | None, sink: list[str]) -> None:
    """Timestamp the first line (or the first containing `needle`) of a pipe, keeping its text."""
    for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
        sink.append(line)
        if not marks and (needle is None or needle in line):
            marks.append(time.perf_counter() - started)


def _server_cpu(state: Path) -> float:
    """CPU seconds so far of the resident server whose pid `local up` recorded in `state`; 0 if none."""
    try:
        pid = json.loads((state / "local" / f"{MODEL}.json").read_text())["pid"]
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, KeyError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def run_once(source: Path, state: Path, task: str, extra: list[str]) -> Sample:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    command = [sys.executable, "-m", "conductor_mcp", "--state-dir", str(state), "run", "--pool", "local", task]
    server_before = _server_cpu(state)
    started = time.perf_counter()
    process = subprocess.Popen(
        [*command, *extra], cwd=source, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    answer: list[float] = []
    summary: list[float] = []
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=_watch, args=(process.stdout, answer, started, None, out)),
        threading.Thread(target=_watch, args=(process.stderr, summary, started, "run ended after", err)),
    ]
    for reader in readers:
        reader.start()
    _, status, usage = os.wait4(process.pid, 0)
    exited = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join(RUN_TIMEOUT_S)
    if process.returncode != 0 or not answer:
        raise SystemExit(f"{source}: exit {process.returncode}\n{''.join(err)[-3000:]}")
    if "--verbose" in extra:
        sys.stderr.write("".join(line for line in err if line.startswith("  ") or "breakdown" in line))
    server = _server_cpu(state) - server_before if server_before else 0.0
    return Sample(answer[0], summary[0] if summary else exited, exited, usage.ru_utime + usage.ru_stime, server)


def _local(source: Path, state: Path, action: str) -> None:
    command = [sys.executable, "-m", "conductor_mcp", "--state-dir", str(state), "local", action]
    subprocess.run(command, cwd=source, check=True, capture_output=True)


def _median(samples: list[Sample], field: str) -> float:
    return statistics.median(getattr(s, field) for s in samples)


def report(mode: str, results: dict[Path, list[Sample]]) -> list[str]:
    target = TARGETS_S[mode]
    lines = [f"{mode} (target: <= {target:.0f} s wall, command to exit, quiet 2-core machine)"]
    header = f"  {'source':<32} {'answer s':>9} {'run s':>7} {'exit s':>7} {'CPU s':>7} {'server CPU s':>13}  verdict"
    lines.append(header)
    for source, samples in results.items():
        exit_s = _median(samples, "exit_s")
        verdict = "PASS" if exit_s <= target else "FAIL"
        lines.append(
            f"  {str(source)[-32:]:<32} {_median(samples, 'answer_s'):>9.2f} {_median(samples, 'summary_s'):>7.2f}"
            f" {exit_s:>7.2f} {_median(samples, 'cpu_s'):>7.2f} {_median(samples, 'server_cpu_s'):>13.2f}  {verdict}"
        )
        every = ", ".join(f"{s.exit_s:.2f}" for s in samples)
        lines.append(f"  {'':<32} exits: {every}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per mode and source (median reported)")
    parser.add_argument("--source", type=Path, action="append", help="a checkout to run from (default: this one)")
    parser.add_argument("--modes", default="cold,resident", help="cold, resident or both (comma-separated)")
    parser.add_argument("--task", default=README_TASK)
    parser.add_argument("--verbose", action="store_true", help="pass --verbose and show each run's breakdown")
    args = parser.parse_args()
    sources = [s.resolve() for s in args.source or [Path(__file__).resolve().parent.parent]]
    extra = ["--verbose"] if args.verbose else []
    print(f"load average {os.getloadavg()}, {len(os.sched_getaffinity(0))} cores, task {args.task!r}")
    with tempfile.TemporaryDirectory(prefix="bench-local-") as tmp:
        states = {source: Path(tmp) / str(n) for n, source in enumerate(sources)}
        lines: list[str] = []
        for mode in args.modes.split(","):
            results: dict[Path, list[Sample]] = {source: [] for source in sources}
            try:
                if mode == "resident":
                    for source in sources:
                        _local(source, states[source], "up")
                for _ in range(args.runs):
                    for source in sources:  # interleaved: each source meets the same load
                        results[source].append(run_once(source, states[source], args.task, extra))
            finally:
                if mode == "resident":
                    for source in sources:
                        _local(source, states[source], "down")
            lines += report(mode, results)
    print(f"load average {os.getloadavg()}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
