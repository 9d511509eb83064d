"""A stand-in for the embedded model's server that dies as a -march=native llama.cpp build does on a CPU that
advertises instructions it does not grant: healthy at start, then killed by SIGILL at its first token.

    python tests/models/sigill_server.py --port PORT [the other options local.LocalServers passes, ignored]

Each request it receives is appended to the file named by --requests-log (to count them: no retry loop). With
--answer TEXT it lives instead, answering each completion with TEXT (a server to start and stop).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--requests-log", required=True)
    parser.add_argument("--answer")
    args, _ = parser.parse_known_args()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"object": "list", "data": [{"id": "gemma3-270m", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            with open(args.requests_log, "a") as log:
                log.write(f"{self.path}\n")
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if args.answer is not None:
                choice = {"index": 0, "text": args.answer, "finish_reason": "stop"}
                usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
                body = json.dumps({"object": "text_completion", "choices": [choice], "usage": usage}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            print("slot launch_slot_: id  0 | task 0 | processing task", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGILL)

        def log_message(self, format: str, *values: object) -> None:
            print(format % values, file=sys.stderr, flush=True)

    print(f"srv init: listening on http://127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    HTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
