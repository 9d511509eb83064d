"""Judge a training run: trained vs warm start, baselines and oracles (see conductor_mcp/learning/judge.py); with
--pool, its committed adapters re-judged on another pool file (conductor_mcp/learning/rejudge.py, the train extra).

python tools/judge_learning.py --run tools/results/grpo-cpu-sim-composed
python tools/judge_learning.py --run tools/results/grpo-cpu-sim-composed-v2/roles-seed-1 --pool FILE --out DIR
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
    if args.pool is not None:
        from conductor_mcp.learning.rejudge import rejudge

        report = rejudge(args)
    else:
        report = asyncio.run(judge(args))
    print(markdown(report), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
