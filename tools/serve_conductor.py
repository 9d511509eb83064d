"""Serve the conductor model on vLLM (see conductor_mcp/models/vllm.py for what is set and why).

python tools/serve_conductor.py --model Qwen/Qwen2.5-7B-Instruct --lora conductor=conductor-7b/adapter
python tools/serve_conductor.py --model ~/.cache/conductor-mcp/models/gemma3-270m-hf --cpu --port 8011
"""

from __future__ import annotations

import signal
import subprocess
import sys

from conductor_mcp.models.vllm import command, environment, parse_args, pool_settings, wait_healthy


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cmd = command(args)
    if args.dry_run:
        print(" ".join(cmd))
        print(pool_settings(args))
        return 0
    process = subprocess.Popen(cmd, env=environment(args), stdout=sys.stderr)  # our stdout: the settings only
    signal.signal(signal.SIGTERM, lambda *_: process.terminate())
    wait_healthy(f"http://{args.host}:{args.port}", process, args.startup_timeout)
    print(f"vLLM is serving {args.model} at http://{args.host}:{args.port}/v1; conductor settings:", flush=True)
    print(pool_settings(args), flush=True)
    return process.wait()


if __name__ == "__main__":
    sys.exit(main())
