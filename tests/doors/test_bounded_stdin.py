"""The stdin relay's line bounding on its own: chunk boundaries, the limit's edge, an unterminated last line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conductor_mcp.doors import bounded_stdin


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
