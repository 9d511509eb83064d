"""`conductor-mcp tokens add NAME [--admin] | list | revoke NAME`: the HTTP server's named tokens (tokens.py).

`add` prints the new token once, on stdout and alone on its line (so `$(conductor-mcp tokens add alice)` captures
it); nothing keeps it in the clear. A running server takes changes at its next request.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from conductor_mcp.cli.output import say
from conductor_mcp.config import Settings
from conductor_mcp.service.tokens import TokenBook


def add_parser(sub: Any) -> None:
    tokens = sub.add_parser("tokens", help="named HTTP tokens, one principal each: add, list, revoke")
    actions = tokens.add_subparsers(dest="tokens_action", required=True)
    add = actions.add_parser("add", help="make a token for NAME and print it once")
    add.add_argument("name", help="the principal's name: 1-32 of a-z, 0-9, '_', '-'")
    add.add_argument("--admin", action="store_true", help="the token sees, continues and cancels every run")
    actions.add_parser("list", help="names, admin flags and creation times (never the tokens)")
    revoke = actions.add_parser("revoke", help="refuse NAME's token from the next request on")
    revoke.add_argument("name")


def run(args: argparse.Namespace, settings: Settings) -> int:
    book = TokenBook(settings.tokens_file)
    if args.tokens_action == "add":
        token = book.add(args.name, admin=args.admin)
        kind = "an admin token (every run)" if args.admin else "a token (its own runs only)"
        say(f"conductor-mcp: {kind} for {args.name!r}; it is shown this once, keep it now:", file=sys.stderr)
        say(token)
    elif args.tokens_action == "revoke":
        book.revoke(args.name)
        say(f"conductor-mcp: revoked {args.name!r}; its runs stay in the store", file=sys.stderr)
    else:
        entries = book.entries()
        for entry in entries:
            say(f"{entry.name:<32} {'admin' if entry.admin else 'user':<6} {entry.created}")
        if not entries:
            say(f"conductor-mcp: no named tokens in {settings.tokens_file}", file=sys.stderr)
    return 0
