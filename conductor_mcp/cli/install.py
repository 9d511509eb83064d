"""`conductor-mcp install HOST`: register this server with an MCP host by writing the host's own config file.

The entry names this install's `conductor-mcp` by absolute path (hosts start servers with their own PATH), the
pool, the names of the environment variables the pool's models read (never their values: each host fills them
from its environment where its config can say so), the host's tool-call timeout where it has one and, for Codex,
how calls of the server's tools are approved (pre-approved unless the user chooses otherwise). An entry
of the same name that says something else is left alone without --force; --dry-run prints what would be
written. --http registers the URL form, sending the bearer token from the CONDUCTOR_HTTP_TOKEN variable.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor_mcp.config import Settings, environment_value
from conductor_mcp.core.limits import HOST_STARTUP_TIMEOUT_S, HOST_TOOL_TIMEOUT_S
from conductor_mcp.errors import RequestError

HOSTS = ("claude-code", "claude-desktop", "codex", "cursor", "vscode")
# Codex's approval modes for an MCP server's tools (`default_tools_approval_mode`). `codex exec` runs with approval
# policy "never": it refuses every call that is not pre-approved ("approve"), so that is the default written here.
TOOL_APPROVALS = {
    "approve": (
        'Codex calls this server\'s tools without asking (default_tools_approval_mode = "approve"), in `codex exec` '
        "too; a run spends the pool's API keys. To be asked before each call instead: --tool-approval prompt"
    ),
    "prompt": (
        'Codex asks you before each call of this server\'s tools (default_tools_approval_mode = "prompt"); '
        "`codex exec` cannot ask, so it refuses them. To pre-approve them: --tool-approval approve"
    ),
    "auto": (
        "Codex's approval policy decides each call of this server's tools (default_tools_approval_mode = \"auto\"); "
        "`codex exec` (policy never) refuses them. To pre-approve them: --tool-approval approve"
    ),
}
TOKEN_ENV = "CONDUCTOR_HTTP_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8765/mcp"
CHECK = {"claude-code": "claude mcp list", "codex": "codex mcp list"}
NO_TIMEOUT = (
    "{host} has no per-server tool timeout to set; tools answer within wait_seconds (45 s by default), below "
    "the ~60 s at which some hosts cut a call, and a longer run goes on for continue_workflow to collect"
)


@dataclass(frozen=True)
class Registration:
    """What to register, whatever the host: the stdio command with its pool, or the URL form."""

    name: str
    command: list[str]
    pool: str
    key_envs: list[str]
    url: str | None = None
    auth: bool = True
    token_file: Path | None = None  # where `serve --http` keeps the token it made
    tool_approval: str = "approve"  # Codex only: see TOOL_APPROVALS


@dataclass
class Plan:
    """One host's entry for a registration, the file it goes in, and what the user should know."""

    host: str
    path: Path
    table: str
    entry: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def server_command() -> list[str]:
    """This install's `conductor-mcp serve`, by absolute path: the script beside this Python (a venv or pipx),
    else the one on PATH, else this Python running the package."""
    scripts = Path(sys.executable).parent
    for name in ("conductor-mcp", "conductor-mcp.exe"):
        if (scripts / name).is_file():
            return [str((scripts / name).absolute()), "serve"]
    found = shutil.which("conductor-mcp")
    return [str(Path(found).absolute()), "serve"] if found else [sys.executable, "-m", "conductor_mcp", "serve"]


def _app_dir(home: Path) -> Path:
    """Where desktop apps keep their settings on this platform."""
    if sys.platform == "darwin":
        return home / "Library" / "Application Support"
    if sys.platform == "win32":
        return Path(environment_value("APPDATA") or home / "AppData" / "Roaming")
    return Path(environment_value("XDG_CONFIG_HOME") or home / ".config")


def config_path(host: str, project: Path | None, home: Path) -> Path:
    """The file the host reads its MCP servers from: the user's, or with `project` that project's."""
    if project is not None:
        per_project = {"claude-code": ".mcp.json", "cursor": ".cursor/mcp.json", "vscode": ".vscode/mcp.json"}
        if host not in per_project:
            raise RequestError(f"--project: {host} has no per-project MCP config; install for the user instead")
        return project / per_project[host]
    if host == "claude-code":
        return Path(environment_value("CLAUDE_CONFIG_DIR") or home) / ".claude.json"
    if host == "claude-desktop":
        return _app_dir(home) / "Claude" / "claude_desktop_config.json"
    if host == "codex":
        return Path(environment_value("CODEX_HOME") or home / ".codex") / "config.toml"
    if host == "cursor":
        return home / ".cursor" / "mcp.json"
    return _app_dir(home) / "Code" / "User" / "mcp.json"


def _env(registration: Registration, reference: Callable[[str], str] | None) -> dict[str, str]:
    env = {"CONDUCTOR_POOL": registration.pool}
    if reference is not None:
        env.update({name: reference(name) for name in registration.key_envs})
    return env


def _stdio(host: str, reg: Registration) -> tuple[dict[str, Any], list[str]]:
    command, args = reg.command[0], reg.command[1:]
    if host == "claude-code":
        env = _env(reg, lambda name: f"${{{name}}}")
        return {
            "type": "stdio",
            "command": command,
            "args": args,
            "env": env,
            "timeout": HOST_TOOL_TIMEOUT_S * 1000,
        }, []
    if host == "codex":
        entry: dict[str, Any] = {"command": command, "args": args, "env": _env(reg, None)}
        if reg.key_envs:
            entry["env_vars"] = reg.key_envs  # Codex passes a server only the variables named here
        entry.update(startup_timeout_sec=HOST_STARTUP_TIMEOUT_S, tool_timeout_sec=HOST_TOOL_TIMEOUT_S)
        return {**entry, "default_tools_approval_mode": reg.tool_approval}, [TOOL_APPROVALS[reg.tool_approval]]
    if host == "claude-desktop":
        notes = [NO_TIMEOUT.format(host="Claude Desktop")]
        if reg.key_envs:
            notes.append(
                f"Claude Desktop passes servers none of your shell's variables and cannot name one in its config: "
                f"add {', '.join(reg.key_envs)} to this entry's env yourself (conductor-mcp never writes key values)"
            )
        return {"command": command, "args": args, "env": _env(reg, None)}, notes
    entry = {"command": command, "args": args, "env": _env(reg, lambda name: f"${{env:{name}}}")}
    notes = [NO_TIMEOUT.format(host="Cursor" if host == "cursor" else "VS Code")]
    return ({"type": "stdio", **entry} if host == "vscode" else entry), notes


def _http(host: str, reg: Registration) -> tuple[dict[str, Any], list[str]]:
    if host == "claude-desktop":
        raise RequestError(
            "--http: Claude Desktop's config file takes local (stdio) servers only; add a remote server in its "
            "Settings > Connectors, or install without --http"
        )
    url = reg.url or DEFAULT_URL
    notes = [f"start the server with `conductor-mcp serve --http` for {url}"]
    if reg.auth:
        notes.append(
            f"{TOKEN_ENV} must hold the server's token where {host} runs: set it for both, or export "
            f'{TOKEN_ENV}="$(cat {reg.token_file or "<state dir>/http-token"})" (the token `serve --http` made) '
            f"before starting {host}"
        )
    if host == "codex":
        entry: dict[str, Any] = {"url": url, "tool_timeout_sec": HOST_TOOL_TIMEOUT_S}
        entry = {**entry, "bearer_token_env_var": TOKEN_ENV} if reg.auth else entry
        return {**entry, "default_tools_approval_mode": reg.tool_approval}, [*notes, TOOL_APPROVALS[reg.tool_approval]]
    header = {"claude-code": f"${{{TOKEN_ENV}}}"}.get(host, f"${{env:{TOKEN_ENV}}}")
    entry = {"type": "http", "url": url} if host != "cursor" else {"url": url}
    if reg.auth:
        entry["headers"] = {"Authorization": f"Bearer {header}"}
    if host == "claude-code":
        entry["timeout"] = HOST_TOOL_TIMEOUT_S * 1000
    else:
        notes.append(NO_TIMEOUT.format(host="Cursor" if host == "cursor" else "VS Code"))
    return entry, notes


def plan(host: str, registration: Registration, path: Path) -> Plan:
    """The entry `host` gets for `registration` in `path`, and the notes that go with it."""
    if host not in HOSTS:
        raise RequestError(f"unknown host {host!r}; known: {', '.join(HOSTS)}")
    make = _http if registration.url is not None else _stdio
    entry, notes = make(host, registration)
    table = {"vscode": "servers", "codex": "mcp_servers"}.get(host, "mcpServers")
    return Plan(host, path, table, entry, notes)


def registration(args: argparse.Namespace, settings: Settings) -> Registration:
    """What `install` registers: this install's server with the pool asked for (or the default pool), and the
    names of the variables its models read their keys from."""
    from conductor_mcp.service.catalogue import (  # not at import: the CLI's parser
        default_pool,
        load_pool,
        resolve_pool_path,
    )

    directories = list(settings.pool_dirs)
    name = args.pool or settings.pool or default_pool(directories)
    pool = load_pool(name, directories)  # an unknown or broken pool fails here, before any file is touched
    by_path = Path(name).suffix in (".yaml", ".yml") or "/" in name
    pool_value = str(resolve_pool_path(name, directories).resolve()) if by_path else name
    key_envs = sorted({spec.api_key_env for spec in pool.specs() if spec.api_key_env})
    url = args.url if args.http else None
    if args.tool_approval is not None and args.host != "codex":
        raise RequestError(f"--tool-approval: {args.host} has no approval mode per server in its config; Codex has")
    approval = args.tool_approval or "approve"
    return Registration(
        args.name, server_command(), pool_value, key_envs, url, not args.no_auth, settings.http_token_file, approval
    )


def _describe(entry: dict[str, Any]) -> str:
    if "url" in entry:
        return f"url {entry['url']}"
    pool = (entry.get("env") or {}).get("CONDUCTOR_POOL")
    command = " ".join(str(part) for part in [entry.get("command", "?"), *entry.get("args", [])])
    return f"command {command}" + (f", pool {pool}" if pool else "")


def install(args: argparse.Namespace, settings: Settings) -> list[str]:
    """Write (or with --dry-run, show) the host's entry; the lines to print. Refuses to replace an entry of the
    same name that differs unless --force."""
    from conductor_mcp.cli import host_configs as host_config

    reg = registration(args, settings)
    project = args.project.absolute() if args.project is not None else None
    path = args.config or config_path(args.host, project, Path.home())
    planned = plan(args.host, reg, path)
    host_config.check_links(path, project if project is not None and args.config is None else path.parent)
    document = host_config.load(path, planned.table)
    existing = host_config.entry_of(document, planned.table, reg.name)
    conflict = existing is not None and existing != planned.entry
    if args.dry_run:
        verb = "would replace (with --force) the entry in" if conflict else "would write to"
        return [f"{verb} {path}:", host_config.snippet(path, planned.table, reg.name, planned.entry), *planned.notes]
    if conflict and not args.force:
        raise RequestError(
            f"{path} already has an MCP server named {reg.name!r} ({_describe(existing or {})}): pass --force to "
            f"replace it, or --name to register this one under another name"
        )
    compiled = byte_compile()  # an entry written by an older install gets its package compiled too
    if existing == planned.entry:
        return [
            f"{args.host} already has MCP server {reg.name!r} in {path} as it would be written",
            *planned.notes,
            *compiled,
        ]
    host_config.write(path, host_config.with_entry(document, path, planned.table, reg.name, planned.entry))
    lines = [f"{'replaced' if conflict else 'added'} MCP server {reg.name!r} ({args.host}) in {path}", *planned.notes]
    return lines + compiled + ([f"check it with: {CHECK[args.host]}"] if args.host in CHECK else [])


def byte_compile() -> list[str]:
    """Compile the package's modules where it is installed, so every start by the host reads bytecode: where
    PYTHONDONTWRITEBYTECODE is set (CI, many container images) Python never caches them itself, and an editable
    install then compiles over a hundred modules before `initialize` at every start (0.1-0.3 s, enough for a host
    that starts its turn without servers that are not ready). Up-to-date files are left as they are. The line to
    print if some could not be written (nothing when all could)."""
    import compileall

    import conductor_mcp

    package = Path(conductor_mcp.__file__).parent
    if compileall.compile_dir(package, quiet=2, workers=1):
        return []
    return [f"note: could not byte-compile {package} (not writable?): the server will compile it at every start"]


def add_parser(sub: Any) -> None:
    """The `install` command's arguments."""
    p = sub.add_parser("install", help="register this server with an MCP host (writes the host's config file)")
    p.add_argument("host", choices=HOSTS)
    p.add_argument("--pool", help="pool name or YAML path the server uses (default: the one `doctor` names)")
    p.add_argument("--name", default="conductor", help="the server's name in the host (default: conductor)")
    project_help = "write the project's config in DIR (default: here), not the user's: claude-code .mcp.json, cursor "
    p.add_argument(
        "--project",
        nargs="?",
        const=Path("."),
        type=Path,
        metavar="DIR",
        help=project_help + ".cursor/mcp.json, vscode .vscode/mcp.json",
    )
    p.add_argument("--config", type=Path, help="write this file instead of the host's usual one")
    p.add_argument("--http", action="store_true", help=f"register the URL of `serve --http`, token from {TOKEN_ENV}")
    p.add_argument("--url", default=DEFAULT_URL, help=f"with --http: the server's MCP URL (default {DEFAULT_URL})")
    p.add_argument("--no-auth", action="store_true", help="with --http: send no token (a server run with --no-auth)")
    p.add_argument("--force", action="store_true", help="replace an entry of the same name that says something else")
    p.add_argument(
        "--tool-approval",
        choices=sorted(TOOL_APPROVALS),
        help="codex: how Codex approves calls of this server's tools (default approve: without asking, which "
        "`codex exec` needs; prompt: ask each time)",
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be written and where; write nothing")
