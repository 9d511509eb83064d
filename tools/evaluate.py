"""Evaluate the conductor against the baselines on one pool (see conductor_mcp/learning/evaluation.py).

python tools/evaluate.py --pool sim --sim-tasks 200 --out eval-out
python tools/evaluate.py --pool frontier --dataset gpqa.jsonl --out eval-gpqa
"""

from __future__ import annotations

from conductor_mcp.runtime.loop import prefer_bundled_price_map

prefer_bundled_price_map()  # before the imports below load litellm

import asyncio
import sys

from conductor_mcp.errors import ConductorError
from conductor_mcp.learning.evaluation import evaluate, parse_args
from conductor_mcp.runtime.logs import configure_logging


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("error")
    try:
        print(asyncio.run(evaluate(args)))
    except ConductorError as exc:
        print(f"evaluate: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
