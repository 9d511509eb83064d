"""What an MCP caller's roots allow: the files a run reads into its context, and the repository its agents work
on. The client's declared roots only narrow the server's (context_files.py checks every path against them)."""

from __future__ import annotations

import warnings
from pathlib import Path

from mcp.server.mcpserver import Context

from conductor_mcp.core.prompts import with_files
from conductor_mcp.core.request import FileRef
from conductor_mcp.errors import RequestError
from conductor_mcp.runtime.logs import get_logger
from conductor_mcp.service.access import Front
from conductor_mcp.service.files import effective_roots, read_context_files, roots_from_uris, workspace_in_roots
from conductor_mcp.service.patches import wants_workspace

log = get_logger(__name__)


async def client_roots(ctx: Context) -> list[Path] | None:
    """The client's declared roots (local directories), or None when it declares none or cannot be asked; a
    client that declares roots but fails to list them gets an error (the roots it meant are unknown)."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.roots is None or not ctx.session.can_send_request:
        return None  # 2026-07-28-era connections have no roots (SEP-2577): the server's roots apply
    try:
        with warnings.catch_warnings():  # roots are deprecated in the 2026-07-28 era, and still what hosts send
            warnings.simplefilter("ignore")
            listed = await ctx.session.list_roots()
    except Exception as exc:
        log.warning("client_roots_unavailable", error=f"{type(exc).__name__}: {exc}")
        raise RequestError(f"files: the client declares roots but listing them failed ({type(exc).__name__})") from None
    return roots_from_uris([str(root.uri) for root in listed.roots])


async def context_with_files(
    ctx: Context, service: Front, context: str | None, files: list[str] | None
) -> tuple[str | None, tuple[FileRef, ...]]:
    """The caller's context with the named files appended (each marked with its path), and their records."""
    if not files:
        return context, ()
    roots = await caller_roots(ctx, service)
    read = await read_context_files(files, roots, len(context or ""))
    return with_files(context, [(f.ref.path, f.text) for f in read]), tuple(f.ref for f in read)


async def workspace_of(ctx: Context, service: Front, workspace: str | None, pool: str | None) -> str | None:
    """The repository the run's agents work on (checked against the roots), when one is named or its pool has
    workers that need one; the client's roots only narrow the server's."""
    if not wants_workspace(service.pools, workspace, pool):
        return None
    return str(workspace_in_roots(workspace, await caller_roots(ctx, service)))


async def caller_roots(ctx: Context, service: Front) -> list[Path]:
    """The roots this caller may name: the server's, narrowed by the client's."""
    return effective_roots(service.settings.file_roots, await client_roots(ctx))
