"""Serve the conductor model on vLLM (see conductor_mcp/models/vllm.py for what is set and why).

python tools/serve_conductor.py --model Qwen/Qwen2.5-7B-Instruct --lora conductor=conductor-7b/adapter
python tools/serve_conductor.py --model ~/.cache/conductor-mcp/models/gemma3-270m-hf --cpu --port 8011
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

from conductor_mcp.models.vllm import command, environment, parse_args, pool_settings, wait_healthy

STOP_GRACE_S = 15.0  # vLLM's own shutdown, then its whole process group is killed


def _stop(group: int) -> None:
    """SIGTERM vLLM's process group (its API server and engine processes alike), then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    timer = threading.Timer(STOP_GRACE_S, _kill, (group,))
    timer.daemon = True  # main() kills the group on its way out anyway
    timer.start()


def _kill(group: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cmd = command(args)
    if args.dry_run:
        print(" ".join(cmd))
        print(pool_settings(args))
        return 0
    # Our stdout carries the settings only. vLLM gets a process group of its own, so a stop reaches its engine
    # processes too (a SIGTERM to the API server alone left them running for half a minute).
    process = subprocess.Popen(cmd, env=environment(args), stdout=sys.stderr, start_new_session=True)
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda *_: _stop(process.pid))
    try:
        wait_healthy(f"http://{args.host}:{args.port}", process, args.startup_timeout)
        print(f"vLLM is serving {args.model} at http://{args.host}:{args.port}/v1; conductor settings:", flush=True)
        print(pool_settings(args), flush=True)
        return process.wait()
    finally:
        _kill(process.pid)  # whatever of the group outlived its API server


if __name__ == "__main__":
    sys.exit(main())
