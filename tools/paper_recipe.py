"""The paper-scale conductor recipe on one GPU machine, in one command (see conductor_mcp/learning/recipe.py).

python tools/paper_recipe.py --dataset train.jsonl --out conductor-7b --dry-run   # every check but the GPU
python tools/paper_recipe.py --dataset train.jsonl --out conductor-7b             # on the GPU machine
"""

from __future__ import annotations

import sys

from conductor_mcp.errors import ConductorError
from conductor_mcp.learning import recipe
from conductor_mcp.learning.card import summary
from conductor_mcp.learning.training import train


def main(argv: list[str] | None = None) -> int:
    own, args = recipe.parse_args(argv)
    print(recipe.plan(own, args))
    problems = recipe.check(own, args)
    for problem in problems:
        print(f"paper_recipe: problem: {problem}", file=sys.stderr)
    if problems:
        return 2
    if own.dry_run:
        print("dry run: every check but the GPU passed")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        print(summary(train(args)), end="")
    except ConductorError as exc:
        print(f"paper_recipe: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
