"""Convert the embedded Gemma 3 270M GGUF into a Hugging Face model folder; prints the folder's path.

python tools/convert_gguf.py [--out DIR]      # default: ~/.cache/conductor-mcp/models/gemma3-270m-hf
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conductor_mcp.models.convert_gguf import convert


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    print(convert(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
