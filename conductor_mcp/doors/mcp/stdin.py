"""Stdio with a size limit: the MCP SDK reads each stdin line whole, however long; HTTP caps a request at 4 MiB.

A thread copies the real stdin into a pipe that takes its place as fd 0, line by line, reading in chunks; a line
over the limit is discarded as it streams past (never held whole) and logged on stderr. The SDK then reads the
pipe as it would read stdin, so its own handling of fd 0 (diverting it from child processes) is unchanged.

So that a client does not wait forever on a request it will never get an answer to, a dropped request whose id
opens the line (as every SDK writes it) is replaced by a request for a method that does not exist, named after
the fault: the SDK answers it with a JSON-RPC error (-32601) that carries the name, to that id.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from conductor_mcp.core.limits import MAX_MCP_MESSAGE_BYTES
from conductor_mcp.runtime.logs import get_logger

CHUNK_BYTES = 64 * 1024
PREFIX_BYTES = 512  # how much of a dropped line is kept, to find its request id
# A request id among the first members of the message, before any nested value (so never one inside params).
_LEADING_ID = re.compile(rb'^\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"[^"\\]*"\s*,)*\s*"id"\s*:\s*(-?\d+|"[^"\\]*")')

log = get_logger(__name__)


@contextmanager
def bounded_stdin(limit: int = MAX_MCP_MESSAGE_BYTES) -> Iterator[None]:
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
    prefix = b""  # the start of that line
    try:
        while chunk := os.read(source, CHUNK_BYTES):
            *complete, rest = chunk.split(b"\n")
            for part in complete:
                if dropped or len(line) + len(part) > limit:
                    prefix = prefix if dropped else bytes((line + part)[:PREFIX_BYTES])
                    _drop(sink, prefix, dropped + len(line) + len(part), limit)
                else:
                    _write_all(sink, bytes(line + part + b"\n"))
                line.clear()
                dropped = 0
            if dropped or len(line) + len(rest) > limit:
                prefix = prefix if dropped else bytes((line + rest)[:PREFIX_BYTES])
                dropped += len(line) + len(rest)
                line.clear()
            else:
                line += rest
        if dropped:
            _drop(sink, prefix, dropped, limit)
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


def _drop(sink: int, prefix: bytes, size: int, limit: int) -> None:
    """Log a dropped line; if it was a request, pass on a stand-in that the SDK answers with an error."""
    found = _LEADING_ID.match(prefix)
    log.error(
        "stdio_message_too_large",
        bytes=size,
        limit=limit,
        request_id=found.group(1).decode("utf-8", "replace") if found else None,
        detail=f"dropped a message of {size} bytes: the stdio transport takes messages of up to {limit} bytes; "
        "split large inputs over several calls",
    )
    if found:
        method = f"message too large: {size} bytes, over the stdio limit of {limit}; it was dropped"
        stand_in = b'{"jsonrpc":"2.0","id":%s,"method":%s}\n' % (found.group(1), json.dumps(method).encode())
        _write_all(sink, stand_in)
