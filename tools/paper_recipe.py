"""The paper-scale conductor recipe on one GPU machine, in one command (see conductor_mcp/learning/recipe.py).

python tools/paper_recipe.py --dataset train.jsonl --out conductor-7b --dry-run   # every check but the GPU
python tools/paper_recipe.py --dataset train.jsonl --out conductor-7b             # on the GPU machine
"""

from __future__ import annotations

import sys

from train_conductor import train_and_report  # tools/ is on sys.path: this script runs from it

from conductor_mcp.learning import recipe


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
    return train_and_report(args, "paper_recipe")


if __name__ == "__main__":
    sys.exit(main())
