"""Train a Conductor with GRPO (TRL): see conductor_mcp/learning/training.py for the recipe and examples."""

from __future__ import annotations

from conductor_mcp.runtime.loop import prefer_bundled_price_map

prefer_bundled_price_map()  # before the imports below load litellm

import argparse
import sys

from conductor_mcp.errors import ConductorError
from conductor_mcp.learning.card import summary
from conductor_mcp.learning.resume import SessionEnded
from conductor_mcp.learning.train_options import parse_args
from conductor_mcp.learning.training import train


def train_and_report(args: argparse.Namespace, program: str) -> int:
    """Train into args.out and print the card's summary (tools/paper_recipe.py ends the same way). A
    ConductorError (bad data, a missing sandbox, an unknown pool) is one line on stderr and exit status 2; a session
    that ended at --session-minutes says so and exits 3 (run the same command to resume)."""
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        print(summary(train(args)), end="")
    except SessionEnded as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        return 3
    except ConductorError as exc:
        print(f"{program}: error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    return train_and_report(parse_args(argv), "train_conductor")


if __name__ == "__main__":
    sys.exit(main())
