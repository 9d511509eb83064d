"""Judge a training run: trained vs warm start, baselines and oracles (see conductor_mcp/learning/judge.py).

python tools/judge_learning.py --run tools/results/grpo-cpu-sim-composed
"""

from __future__ import annotations

from conductor_mcp.runtime.loop import prefer_bundled_price_map

prefer_bundled_price_map()  # before the imports below load litellm

import asyncio
import sys

from conductor_mcp.learning.comparison import markdown
from conductor_mcp.learning.judge import judge, parse_args
from conductor_mcp.runtime.logs import configure_logging


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("error")
    print(markdown(asyncio.run(judge(args))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
