"""How the command line writes: everything through `say`, untrusted text made harmless for a terminal."""

from __future__ import annotations

import re
import sys
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """Untrusted text (tasks, model output, pool files) made harmless for a terminal: control characters such as
    ESC are shown as escapes, not obeyed. Newlines and tabs stay."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def say(*parts: object, file: Any = None, end: str = "\n", flush: bool = False) -> None:
    """Everything the CLI writes goes through here (stdout, or stderr for progress and errors)."""
    print(terminal_safe(" ".join(str(part) for part in parts)), file=file or sys.stdout, end=end, flush=flush)
