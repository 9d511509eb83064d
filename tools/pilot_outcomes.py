"""The real-outcome pilot (conductor_mcp/learning/pilot.py): the embedded model as four few-shot specialists, every
worker on every generated task, against a resident local model server; writes the accuracy table, the verdict and
the CPU seconds it cost, plus one row per answer.

    nice -n 19 python tools/pilot_outcomes.py --out tools/results/pilot-outcomes

Uses the resident server of --state-dir if one runs (`conductor-mcp local up`), else starts one there and stops it
at the end. Exits 1 on a no-go.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from conductor_mcp.learning import pilot
from conductor_mcp.models.local import DEFAULT_MODEL, LocalServers

TICKS_PER_S = 100.0  # /proc/PID/stat's clock ticks (SC_CLK_TCK) on Linux


def _process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=30, help="tasks per family")
    parser.add_argument("--seed", default="pilot")
    parser.add_argument(
        "--state-dir", type=Path, help="where a resident server is found or started (default: a temp dir)"
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for pilot.md and rows.jsonl")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one completion may take")
    args = parser.parse_args(argv)
    command = "python tools/pilot_outcomes.py " + " ".join(argv if argv is not None else sys.argv[1:])
    with tempfile.TemporaryDirectory() as scratch:
        servers = LocalServers(args.state_dir or Path(scratch))
        started_here = servers.resident(DEFAULT_MODEL) is None
        running = servers.up(DEFAULT_MODEL)
        try:
            server_before, own_before, wall_before = _process_cpu_s(running.pid), _own_cpu_s(), time.monotonic()
            results: list[tuple[str, pilot.Task, bool]] = []
            args.out.mkdir(parents=True, exist_ok=True)
            with (args.out / "rows.jsonl").open("w") as rows:
                # worker by worker, so llama.cpp keeps each worker's few-shot prefix evaluated across its tasks
                for worker in pilot.FAMILIES:
                    for task in pilot.task_set(args.count, args.seed):
                        prompt = pilot.few_shot_prompt(worker, task.question, args.seed)
                        text = pilot.answer(running.base_url, DEFAULT_MODEL, prompt, args.timeout)
                        ok = pilot.correct(task, text)
                        results.append((worker, task, ok))
                        row = {"worker": worker, "task": task.id, "question": task.question, "expected": task.answer}
                        rows.write(json.dumps({**row, "completion": text, "correct": ok}) + "\n")
            cpu_s = {
                "model server CPU": _process_cpu_s(running.pid) - server_before,
                "this tool CPU": _own_cpu_s() - own_before,
                "wall": time.monotonic() - wall_before,
            }
        finally:
            if started_here:
                servers.down(DEFAULT_MODEL)
    result = pilot.table(results)
    text = pilot.markdown(result, cpu_s, command, args.count)
    (args.out / "pilot.md").write_text(text)
    (args.out / "table.json").write_text(json.dumps({"accuracy": result.accuracy, "cpu_s": cpu_s}, indent=1) + "\n")
    sys.stdout.write(text)
    return 0 if result.go() else 1


if __name__ == "__main__":
    sys.exit(main())
