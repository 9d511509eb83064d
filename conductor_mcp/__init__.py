"""conductor-mcp: a small Conductor LLM writes workflows over a pool of LLM workers; this package runs them.

The public API, for an application that embeds the engine:

    from conductor_mcp import RunRequest, Service, Settings

    async with Service.open(Settings.from_env()) as service:
        run = await service.orchestrate(RunRequest.of(task="..."))

Each name is imported when first used, so `import conductor_mcp` (and every command that needs none of them)
stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["ConductorError", "Run", "RunRequest", "Service", "Settings"]

if TYPE_CHECKING:
    from conductor_mcp.config import Settings
    from conductor_mcp.core.records import Run
    from conductor_mcp.core.request import RunRequest
    from conductor_mcp.errors import ConductorError
    from conductor_mcp.service.service import Service

_HOMES = {
    "ConductorError": "conductor_mcp.errors",
    "Run": "conductor_mcp.core.records",
    "RunRequest": "conductor_mcp.core.request",
    "Service": "conductor_mcp.service.service",
    "Settings": "conductor_mcp.config",
}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module 'conductor_mcp' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
