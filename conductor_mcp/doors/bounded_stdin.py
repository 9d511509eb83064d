"""Stdio with a size limit: the MCP SDK reads each stdin line whole, however long; HTTP caps a request at 4 MiB.

A thread copies the real stdin into a pipe that takes its place as fd 0, line by line, reading in chunks; a line
over the limit is discarded as it streams past (never held whole) and logged on stderr. The SDK then reads the
pipe as it would read stdin, so its own handling of fd 0 (diverting it from child processes) is unchanged.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from conductor_mcp.logs import get_logger

MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # the streamable HTTP transport's cap on a request body
CHUNK_BYTES = 64 * 1024

log = get_logger(__name__)


@contextmanager
def bounded_stdin(limit: int = MAX_MESSAGE_BYTES) -> Iterator[None]:
    """While inside, fd 0 yields stdin's lines of at most `limit` bytes; longer ones are dropped."""
    source = os.dup(0)
    read_end, write_end = os.pipe()
    os.dup2(read_end, 0)
    os.close(read_end)
    # A daemon: it may stay blocked reading stdin after the server has stopped; it dies with the process.
    threading.Thread(target=relay_lines, args=(source, write_end, limit), name="stdin-relay", daemon=True).start()
    try:
        yield
    finally:
        os.dup2(source, 0)  # the relay still holds `source`; fd 0 is stdin again for whatever runs next


def relay_lines(source: int, sink: int, limit: int) -> None:
    """Copy newline-terminated lines from fd `source` to fd `sink`, dropping those over `limit` bytes; close
    `sink` at the end of input so that the reader sees it end too."""
    line = bytearray()
    dropped = 0  # bytes of the over-long line being discarded, 0 when none is
    try:
        while chunk := os.read(source, CHUNK_BYTES):
            *complete, rest = chunk.split(b"\n")
            for part in complete:
                if dropped or len(line) + len(part) > limit:
                    _report(dropped + len(line) + len(part), limit)
                else:
                    _write_all(sink, bytes(line + part + b"\n"))
                line.clear()
                dropped = 0
            if dropped or len(line) + len(rest) > limit:
                dropped += len(line) + len(rest)
                line.clear()
            else:
                line += rest
        if dropped:
            _report(dropped, limit)
        elif line:
            _write_all(sink, bytes(line))
    except OSError as exc:  # the reader went away (the server stopped): nothing left to relay to
        log.debug("stdin_relay_stopped", error=str(exc))
    finally:
        os.close(sink)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _report(size: int, limit: int) -> None:
    log.error(
        "stdio_message_too_large",
        bytes=size,
        limit=limit,
        detail=f"dropped a message of {size} bytes: the stdio transport takes messages of up to {limit} bytes; "
        "split large inputs over several calls",
    )
