"""A scripted OpenAI-compatible chat server on loopback, for benchmarks of the real HTTP path: the benchmarks reach
it through litellm's `hosted_vllm/` route exactly as a pool reaches vLLM or llama.cpp, and it runs in its own
process so its CPU is not counted as the client's.

Every `POST /v1/chat/completions` is answered after the delay its model is given (`--delay MODEL=SECONDS`, else
`--default-delay`), with fixed usage: a model whose name ends in `conductor` answers WORKFLOW (two parallel steps,
then one that reads both), any other model a fixed answer. HTTP/1.1 keep-alive on asyncio streams: no framework,
so the stub costs the machine little beside the process it serves.

    python tools/stub_openai.py PORT [--delay conductor=6 --delay lead=12 ...] [--default-delay 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

CONDUCTOR = "conductor"
ANSWER = "Worked through it step by step.\nANSWER: 42"
# The conductor's workflow: `helper` and `third` in parallel, then `lead` reading both. The pools built for it
# name these three workers (tools/bench_load.py, tools/bench_engine.py).
WORKERS = ("lead", "helper", "third")
WORKFLOW = json.dumps(
    {
        "reasoning": "Two independent attempts, then the strongest worker checks them.",
        "steps": [
            {"worker": "helper", "instruction": "Solve the task and state the answer.", "access": []},
            {"worker": "third", "instruction": "Solve the task independently.", "access": []},
            {"worker": "lead", "instruction": "Check both attempts and give the final answer.", "access": "all"},
        ],
    }
)
USAGE = {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140}


def reply(body: dict[str, object], counter: int) -> bytes:
    """The JSON body of a chat completion answering `body`."""
    model = str(body.get("model", ""))
    text = WORKFLOW if model.endswith(CONDUCTOR) else ANSWER
    return json.dumps(
        {
            "id": f"chatcmpl-stub-{counter}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": USAGE,
        }
    ).encode()


def response(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


class Stub:
    def __init__(self, delays: dict[str, float], default_delay: float) -> None:
        self.delays = delays
        self.default_delay = default_delay
        self.count = 0

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One keep-alive connection: requests answered in order until the client closes it."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = next(
                    (int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")), 0
                )
                payload = await reader.readexactly(length) if length else b""
                writer.write(await self.answer(lines[0], payload))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(self, request_line: str, payload: bytes) -> bytes:
        method, path, _ = request_line.split(" ", 2)
        if method == "GET" and path.endswith("/models"):
            return response("200 OK", json.dumps({"object": "list", "data": [{"id": CONDUCTOR}]}).encode())
        if method != "POST" or not path.endswith("/chat/completions"):
            return response("404 Not Found", b'{"error": {"message": "not found"}}')
        body = json.loads(payload)
        self.count += 1
        delay = self.delays.get(str(body.get("model")), self.default_delay)
        if delay > 0:
            await asyncio.sleep(delay)
        return response("200 OK", reply(body, self.count))


def delay_pair(text: str) -> tuple[str, float]:
    model, _, seconds = text.partition("=")
    return model, float(seconds)


async def serve(port: int, delays: dict[str, float], default_delay: float) -> None:
    server = await asyncio.start_server(Stub(delays, default_delay).connection, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def start(port: int, delays: dict[str, float] | None = None, default_delay: float = 0.0) -> subprocess.Popen[bytes]:
    """The stub in a process of its own, answering on 127.0.0.1:PORT (its base URL is http://127.0.0.1:PORT/v1)."""
    pairs = [arg for model, s in (delays or {}).items() for arg in ("--delay", f"{model}={s}")]
    command = [sys.executable, str(Path(__file__)), str(port), *pairs, "--default-delay", str(default_delay)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"the stub OpenAI server on port {port} did not start (exit {proc.wait()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--delay", type=delay_pair, action="append", default=[], help="MODEL=SECONDS")
    parser.add_argument("--default-delay", type=float, default=0.0)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.run(serve(args.port, dict(args.delay), args.default_delay))
    except ImportError:
        asyncio.run(serve(args.port, dict(args.delay), args.default_delay))


if __name__ == "__main__":
    sys.exit(main())
