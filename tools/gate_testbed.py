"""The gate before any LLM time on a testbed (conductor_mcp/learning/gate.py): the scripted conductor against the
best input-independent completion on training tasks, a tiny feature policy trained with GRPO's group-relative
advantage on the rollouts an LLM run would see against the scripted conductor on held-out tasks and sub-pools, and
the role pattern chosen per class of task against the best one played everywhere.

    python tools/gate_testbed.py --out tools/results/gate/sim-composed-v2.md

Exits 1 when the gate fails. CPU only, minutes.
"""

from __future__ import annotations

from conductor_mcp.runtime.loop import prefer_bundled_price_map

prefer_bundled_price_map()  # before the imports below load litellm

import sys

from conductor_mcp.learning.gate import markdown, parse_args, run, verdict


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    numbers = run(args)
    text = markdown(numbers, "python tools/gate_testbed.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0 if all(verdict(numbers)) else 1


if __name__ == "__main__":
    sys.exit(main())
