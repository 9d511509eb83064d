"""The stdin relay's line bounding on its own: chunk boundaries, the limit's edge, an unterminated last line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conductor_mcp.doors.mcp import stdin as bounded_stdin


@pytest.mark.parametrize("chunk", [1, 3, 7, 64 * 1024])
def test_lines_over_the_limit_are_dropped_at_any_chunk_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(bounded_stdin, "CHUNK_BYTES", chunk)
    source_file = tmp_path / "stdin"
    source_file.write_bytes(b"12345\n123456\n\nab\n" + b"x" * 50 + b"\nlast")
    source = os.open(source_file, os.O_RDONLY)
    read_end, write_end = os.pipe()
    try:
        bounded_stdin.relay_lines(source, write_end, limit=5)  # closes write_end at the end of input
        relayed = os.read(read_end, 1 << 16)
    finally:
        os.close(source)
        os.close(read_end)
    assert relayed == b"12345\n\nab\nlast"  # exactly 5 bytes passes; 6 and 50 are dropped


def test_an_over_long_unterminated_last_line_is_dropped(tmp_path: Path) -> None:
    source_file = tmp_path / "stdin"
    source_file.write_bytes(b"ok\n" + b"y" * 100)
    source = os.open(source_file, os.O_RDONLY)
    read_end, write_end = os.pipe()
    try:
        bounded_stdin.relay_lines(source, write_end, limit=10)
        assert os.read(read_end, 1 << 16) == b"ok\n"
    finally:
        os.close(source)
        os.close(read_end)


@pytest.mark.parametrize(
    ("line", "request_id"),
    [
        (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"', b"7"),
        (b'{"jsonrpc": "2.0", "method": "tools/call", "id": "a-1", "params": {"x": "', b'"a-1"'),
        (b'{"jsonrpc":"2.0","method":"notifications/x","params":{"id":9,"x":"', None),  # an id inside params
    ],
)
def test_a_dropped_request_becomes_a_stand_in_the_sdk_answers_with_an_error(
    tmp_path: Path, line: bytes, request_id: bytes | None
) -> None:
    source_file = tmp_path / "stdin"
    source_file.write_bytes(line + b"z" * 100 + b'"}}\n{"next":1}\n')
    source = os.open(source_file, os.O_RDONLY)
    read_end, write_end = os.pipe()
    try:
        bounded_stdin.relay_lines(source, write_end, limit=50)
        relayed = os.read(read_end, 1 << 16).splitlines()
    finally:
        os.close(source)
        os.close(read_end)
    assert relayed[-1] == b'{"next":1}'
    if request_id is None:
        assert len(relayed) == 1
    else:
        stand_in = json.loads(relayed[0])
        assert stand_in["id"] == json.loads(request_id) and "message too large" in stand_in["method"]
