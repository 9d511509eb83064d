"""`conductor-mcp`: run, plan, show and list runs, list pools. Results go to stdout; progress and logs to stderr."""

from __future__ import annotations

import argparse
import atexit
import json
import sys
from pathlib import Path
from typing import Any

from conductor_mcp import __version__
from conductor_mcp.cli import install as hosts
from conductor_mcp.cli import tokens as cli_tokens
from conductor_mcp.cli.output import say as _say
from conductor_mcp.cli.progress import RunClock
from conductor_mcp.cli.serve import serve, view
from conductor_mcp.config import Settings
from conductor_mcp.errors import ConductorError, RequestError
from conductor_mcp.runtime.logs import configure_logging
from conductor_mcp.runtime.loop import prefer_bundled_price_map, run_async, skip_final_collections

EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
PRUNABLE = ("planned", "done", "failed", "interrupted", "cancelled")  # never "running"


_ALLOWED_HOST_HELP = (
    "extra Host header to accept (DNS-rebinding guard): NAME accepts it with any port or none, NAME:PORT that port"
)
_NO_AUTH_HELP = (
    "serve HTTP without a bearer token (loopback only): any local account can then read runs and spend the pools' keys"
)
_METRICS_PORT_HELP = (
    "also serve Prometheus /metrics on this loopback port, without a token (env CONDUCTOR_METRICS_PORT; "
    "with --http, /metrics is served behind the token anyway)"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="conductor-mcp",
        description="A Conductor LLM writes a workflow over a pool of LLM workers; conductor-mcp runs it.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--state-dir", type=Path, help="where runs are stored (env CONDUCTOR_STATE_DIR)")
    parser.add_argument("--log-level", help="log level on stderr (env CONDUCTOR_LOG_LEVEL; default warning here)")
    sub = parser.add_subparsers(dest="command", required=True)

    def task_command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("task", help="the task, or '-' to read it from stdin")
        p.add_argument("--pool", help="pool name or YAML path (env CONDUCTOR_POOL; default: see `doctor`)")
        p.add_argument("--max-steps", type=int, help="most steps the conductor may write (default: the pool's)")
        p.add_argument("--context-file", type=Path, help="a file whose text every worker sees with the task")
        p.add_argument("--metadata", help="task metadata as JSON, e.g. the simulator's domain and answer")
        p.add_argument("--json", action="store_true", help="print the full run as JSON instead of markdown")
        p.add_argument("--workspace", help="the repository agents work on, inside the roots (default: the first)")
        return p

    run = task_command("run", "plan and run a task, printing the answer and transcript")
    run.add_argument("--max-tokens", type=int, help="stop before a call that would exceed this many tokens")
    run.add_argument("--max-usd", type=float, help="stop before a call that would exceed this cost in USD")
    run.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    run.add_argument("--verbose", action="store_true", help="say where the time went: start-up, model, tokens, ours")
    run.add_argument(
        "--self-correct", action="store_true", default=None, help="give the conductor one recursive look at the end"
    )
    task_command("plan", "write the workflow for a task without running it (stored as a planned run)")

    show = sub.add_parser("show", help="show a stored run")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true")

    _runs_parser(sub)

    serve = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    serve.add_argument("--allowed-host", action="append", default=[], help=_ALLOWED_HOST_HELP)
    serve.add_argument("--no-auth", action="store_true", help=_NO_AUTH_HELP)
    serve.add_argument("--metrics-port", type=int, help=_METRICS_PORT_HELP)

    view = sub.add_parser("view", help="serve the run viewer on loopback over the store (read only); print its URL")
    view.add_argument("run_id", nargs="?", help="open this run's page (default: the run list)")
    view.add_argument("--port", type=int, default=0, help="loopback port (default: a free one)")
    view.add_argument("--no-browser", action="store_true", help="print the URL only; do not open a browser")

    sub.add_parser("doctor", help="say which pools can run here, which is the default, and why")
    local_cmd = sub.add_parser("local", help="manage a resident server for the embedded local model")
    local_cmd.add_argument("action", choices=["up", "down", "status"])
    local_cmd.add_argument("--model", default="gemma3-270m", help="local model name (default gemma3-270m)")

    hosts.add_parser(sub)
    cli_tokens.add_parser(sub)
    pools = sub.add_parser("pools", help="list and validate the pools on the search path")
    pools.add_argument("--json", action="store_true")
    return parser


def _runs_parser(sub: Any) -> None:
    """`runs` lists; `runs prune` deletes old runs (retention)."""
    runs = sub.add_parser("runs", help="list recent runs (`runs prune --help`: delete old ones)")
    runs.add_argument("--limit", type=int, default=20)
    runs.add_argument("--status", help="only runs in this status")
    runs.add_argument("--json", action="store_true")
    prune = runs.add_subparsers(dest="runs_action").add_parser(
        "prune", help="delete runs (and their steps) not updated for DAYS days; running runs are never deleted"
    )
    prune.add_argument("--older-than", type=float, required=True, metavar="DAYS", help="last updated over DAYS ago")
    prune.add_argument(
        "--status", action="append", choices=PRUNABLE, help="only runs in this status (repeatable; default: any)"
    )
    prune.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")


def _progress_printer(clock: RunClock) -> Any:
    async def progress(event: Any) -> None:
        _say(clock.line(event), file=sys.stderr, flush=True)

    return progress


def _read_task(args: argparse.Namespace) -> tuple[str, str | None, dict[str, Any]]:
    task = sys.stdin.read() if args.task == "-" else args.task
    context = args.context_file.read_text(encoding="utf-8") if args.context_file else None
    metadata: Any = {}
    if args.metadata:
        try:
            metadata = json.loads(args.metadata)
        except ValueError as exc:
            raise RequestError(f"--metadata: not valid JSON ({exc})") from None
        if not isinstance(metadata, dict):
            raise RequestError("--metadata: must be a JSON object")
    return task, context, metadata


async def _run_or_plan(args: argparse.Namespace, settings: Settings) -> int:
    from conductor_mcp.service.upkeep import embedded_servers, prestart_embedded_models

    servers = embedded_servers(settings)
    breakdown = None
    if getattr(args, "verbose", False):  # before the run's imports, which it times
        from conductor_mcp.service.breakdown import Breakdown

        breakdown = Breakdown(servers)
    prestart_embedded_models(args.pool, settings, servers)
    from conductor_mcp.core.request import RunRequest
    from conductor_mcp.core.usage import Budget
    from conductor_mcp.doors.render import to_markdown
    from conductor_mcp.service.files import workspace_in_roots
    from conductor_mcp.service.service import Service

    if breakdown:
        breakdown.imported()
    task, context, metadata = _read_task(args)
    request = RunRequest.of(task=task, pool=args.pool, max_steps=args.max_steps, context=context, metadata=metadata)
    if args.workspace is not None:
        request = request.but(workspace=str(workspace_in_roots(args.workspace, settings.file_roots)))
    clock = None if args.command != "run" or args.quiet else RunClock()
    async with Service.open(settings, local_servers=servers) as service:  # closing it closes its clients and servers
        if args.command == "run":
            budget = Budget(max_tokens=args.max_tokens, max_usd=args.max_usd)
            request = request.but(budget=budget, self_correct=args.self_correct)
            result = await service.orchestrate(request, on_event=clock and _progress_printer(clock))
        else:
            result = await service.plan(request)
        # The answer is out before anything closes: the user reads it while the process winds down.
        _say(result.model_dump_json(indent=2) if args.json else to_markdown(result), flush=True)
        if clock:
            _say(clock.summary(), file=sys.stderr, flush=True)
        for line in breakdown.lines() if breakdown else []:
            _say(line, file=sys.stderr, flush=True)
    return EXIT_RUN_FAILED if result.status == "failed" else EXIT_OK


def _show(args: argparse.Namespace, settings: Settings) -> int:
    from conductor_mcp.doors.render import to_markdown
    from conductor_mcp.service.reader import RunReader

    with RunReader.open(settings) as reader:
        run = reader.get_run(args.run_id)
    _say(run.model_dump_json(indent=2) if args.json else to_markdown(run))
    return EXIT_OK


def _mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB"


def _prune(args: argparse.Namespace, settings: Settings) -> int:
    """Retention: nothing removes runs on its own, so old ones are deleted here, by age and status."""
    from conductor_mcp.service.upkeep import prune_runs

    if args.older_than < 0:
        raise RequestError(f"--older-than: must be 0 or more days, got {args.older_than}")
    pruned, location = prune_runs(settings, args.older_than, args.status, args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    _say(f"{verb} {pruned.runs} runs ({_mib(pruned.data_bytes)} of run data) from {location}")
    if not args.dry_run and pruned.runs:
        _say(f"store size: {_mib(pruned.size_before)} -> {_mib(pruned.size_after)} (vacuumed)")
    return EXIT_OK


def _runs(args: argparse.Namespace, settings: Settings) -> int:
    from conductor_mcp.service.reader import RunReader

    if args.runs_action == "prune":
        return _prune(args, settings)

    with RunReader.open(settings) as reader:
        rows = reader.list_runs(args.limit, args.status)
    if args.json:
        _say(json.dumps(rows, indent=2))
    elif not rows:
        _say("no runs yet")
    else:
        for row in rows:
            task = " ".join(row["task"].split())[:70]
            _say(f"{row['id']}  {row['created_at'][:19]}  {row['status']:<11}  {row['pool']:<10}  {task}")
    return EXIT_OK


def _pools(args: argparse.Namespace, settings: Settings) -> int:
    from conductor_mcp.service.catalogue import PoolCatalog

    summaries = PoolCatalog(list(settings.pool_dirs), settings.pool).summaries()
    if args.json:
        _say(json.dumps([s.__dict__ for s in summaries], indent=2))
    else:
        for s in summaries:
            if s.error:
                _say(f"{s.name:<12} INVALID  {s.error}")
            else:
                _say(f"{s.name:<12} {len(s.workers)} workers, conductor {s.conductor}: {s.description}")
    return EXIT_BAD_INPUT if any(s.error for s in summaries) else EXIT_OK


def _doctor(settings: Settings) -> int:
    from conductor_mcp.service.catalogue import default_pool, diagnose

    reason = "CONDUCTOR_POOL" if settings.pool else "the first pool whose API keys are set, else local"
    _say(f"default pool: {settings.pool or default_pool(list(settings.pool_dirs))} ({reason})")
    for diagnosis in diagnose(list(settings.pool_dirs)):
        _say(f"{diagnosis.name:<12} {'usable' if diagnosis.usable else 'NOT USABLE'}")
        for problem in diagnosis.problems:
            _say(f"{'':<12} - {problem}")
    agents_ok = _doctor_agents(settings)
    if not _doctor_embedded(settings):
        return EXIT_BAD_INPUT
    store = _doctor_store(settings)
    return store if agents_ok else EXIT_BAD_INPUT


def _doctor_agents(settings: Settings) -> bool:
    from conductor_mcp.service.agent_check import check_agents

    return run_async(check_agents(settings, _say)) == 0


def _doctor_embedded(settings: Settings) -> bool:
    from conductor_mcp.service.upkeep import embedded_model_report

    usable, line = embedded_model_report(settings.state_dir)
    if line:
        _say(line)
    return usable


def _doctor_store(settings: Settings) -> int:
    """The run store's backend, reachability, schema version, size and contents; a store that cannot be opened
    is reported, not a traceback."""
    from conductor_mcp.service.upkeep import describe_store

    info = describe_store(settings)
    _say(f"run store: {info.backend} at {info.location}")
    stats = info.stats
    if stats is None:
        _say(f"{'':<12} NOT USABLE: {info.problem}")
        return EXIT_BAD_INPUT
    counts = ", ".join(f"{n} {status}" for status, n in stats.runs_by_status.items()) or "no runs"
    _say(f"{'':<12} reachable, schema version {stats.schema_version}, {_mib(stats.size_bytes)}: {counts}")
    if stats.oldest:
        _say(f"{'':<12} oldest run created {stats.oldest[:19]}; `runs prune --older-than DAYS` deletes old runs")
    return EXIT_OK


def _local(args: argparse.Namespace, settings: Settings) -> int:
    from conductor_mcp.service.upkeep import manage_embedded_model

    _say(manage_embedded_model(args.action, args.model, settings.state_dir))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    prefer_bundled_price_map()  # before any command imports litellm
    atexit.register(skip_final_collections)  # first registered, so it runs last: after every other exit hook
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env(state_dir=args.state_dir, log_level=args.log_level)
    except ConductorError as exc:  # a CONDUCTOR_* variable that does not parse
        _say(f"conductor-mcp: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    default_level = "info" if args.command == "serve" else "warning"
    configure_logging(settings.log_level if "log_level" in settings.model_fields_set else default_level)
    try:
        return _dispatch(args, settings)
    except ConductorError as exc:
        _say(f"conductor-mcp: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # a file named on the command line (--context-file) that cannot be read
        _say(f"conductor-mcp: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _say("conductor-mcp: interrupted; finished steps are kept in the store", file=sys.stderr)
        return EXIT_INTERRUPTED


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command in ("run", "plan"):
        return run_async(_run_or_plan(args, settings))
    if args.command == "serve":
        return run_async(serve(args, settings))
    if args.command == "view":
        return run_async(view(args, settings))
    if args.command == "show":
        return _show(args, settings)
    if args.command == "runs":
        return _runs(args, settings)
    if args.command == "doctor":
        return _doctor(settings)
    if args.command == "local":
        return _local(args, settings)
    if args.command == "tokens":
        return cli_tokens.run(args, settings)
    if args.command == "install":
        for line in hosts.install(args, settings):
            _say(line)
        return EXIT_OK
    return _pools(args, settings)
