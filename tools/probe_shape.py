"""Print how likely a trained conductor is to add steps after the first (conductor_mcp/learning/shape_probe.py).

python tools/probe_shape.py conductor-cpu     # the --out folder of tools/train_conductor.py (needs the train extra)
"""

from __future__ import annotations

from conductor_mcp.runtime.loop import prefer_bundled_price_map

prefer_bundled_price_map()  # before the imports below load litellm

import argparse
import sys
from pathlib import Path

from conductor_mcp.errors import ConductorError
from conductor_mcp.learning.shape_probe import probe, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a training run's --out folder (card.json and its adapters)")
    args = parser.parse_args(argv)
    try:
        print(table(probe(args.run_dir)), end="")
    except ConductorError as exc:
        print(f"probe_shape: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
