"""Train a Conductor with GRPO (TRL): see conductor_mcp/learning/training.py for the recipe and examples."""

from __future__ import annotations

import sys

from conductor_mcp.errors import ConductorError
from conductor_mcp.learning.card import summary
from conductor_mcp.learning.training import parse_args, train


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        print(summary(train(args)), end="")
    except ConductorError as exc:
        print(f"train_conductor: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
