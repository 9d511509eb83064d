"""A stdio relay between an MCP host and a server it starts: `python wire_tap.py LOG COMMAND...` runs COMMAND and
passes every line both ways, appending each to LOG as JSON `{"from": "client"|"server", "message": ...}`, so a
test reads what a real host sent. A test helper: the host starts it in place of the server."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import IO


def relay(source: IO[bytes], sink: IO[bytes], side: str, log: IO[str], lock: threading.Lock) -> None:
    for line in source:
        with lock:
            log.write(json.dumps({"from": side, "message": json.loads(line)}) + "\n")
            log.flush()
        sink.write(line)
        sink.flush()


def main() -> int:
    log_path, command = sys.argv[1], sys.argv[2:]
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    lock = threading.Lock()
    with open(log_path, "a", encoding="utf-8") as log:
        replies = threading.Thread(target=relay, args=(server.stdout, sys.stdout.buffer, "server", log, lock))
        replies.start()
        relay(sys.stdin.buffer, server.stdin, "client", log, lock)
        server.stdin.close()
        code = server.wait()
        replies.join()
    return code


if __name__ == "__main__":
    sys.exit(main())
