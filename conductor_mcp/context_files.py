"""Files a caller names by path, read on the server so agents need not paste them into `context`.

A path must lie inside one of the roots: the client's declared roots when it declares any, else the server's
CONDUCTOR_ROOTS, else its working directory. Paths are resolved (symlinks followed, `..` collapsed) before the
check, so neither can lead out of a root. Only UTF-8 text of regular files is read; anything else is an error
that names the path. Each file's path, size and sha256 go into the run (provenance: what every worker saw).
"""

from __future__ import annotations

import hashlib
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from conductor_mcp.core.request import MAX_CONTEXT_CHARS, FileRef
from conductor_mcp.errors import RequestError

MAX_FILE_BYTES = 1_000_000
MAX_FILES = 50


@dataclass(frozen=True)
class ContextFile:
    ref: FileRef
    text: str


def read_context_files(paths: list[str], roots: list[Path], context_chars: int = 0) -> list[ContextFile]:
    """Read and check the named files; the first root anchors relative paths."""
    if len(paths) > MAX_FILES:
        raise RequestError(f"files: {len(paths)} files exceeds the limit of {MAX_FILES}")
    if not roots:
        raise RequestError("files: no root directory is configured to read files from")
    resolved_roots = [root.resolve() for root in roots]
    files = [_read(path, resolved_roots) for path in paths]
    total = context_chars + sum(len(f.text) for f in files)
    if total > MAX_CONTEXT_CHARS:
        raise RequestError(f"files: with the context, {total} characters exceeds the limit of {MAX_CONTEXT_CHARS}")
    return files


def _read(name: str, roots: list[Path]) -> ContextFile:
    candidate = Path(name).expanduser()
    candidate = candidate if candidate.is_absolute() else roots[0] / candidate
    try:
        path = candidate.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a symlink loop
        raise RequestError(f"files: {name!r} does not exist") from None
    if not any(path.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(root) for root in roots)
        raise RequestError(f"files: {name!r} is outside the allowed roots ({allowed})")
    mode = path.stat().st_mode
    if stat.S_ISDIR(mode):
        raise RequestError(f"files: {name!r} is a directory; name the files in it")
    if not stat.S_ISREG(mode):
        raise RequestError(f"files: {name!r} is not a regular file (a device, pipe or socket)")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise RequestError(f"files: {name!r} is {size} bytes, over the limit of {MAX_FILE_BYTES}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError(f"files: {name!r} is not UTF-8 text (binary files cannot be given to workers)") from None
    if "\x00" in text:
        raise RequestError(f"files: {name!r} is not text (it contains NUL bytes)")
    return ContextFile(FileRef(path=str(path), size=len(data), sha256=hashlib.sha256(data).hexdigest()), text)


def roots_from_uris(uris: list[str]) -> list[Path]:
    """Local directories from a client's `file://` root URIs (others are ignored)."""
    return [Path(unquote(urlparse(uri).path)) for uri in uris if uri.startswith("file://")]
