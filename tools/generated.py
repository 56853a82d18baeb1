"""What the extractors of committed files share (tools/discovery_upstream.py, tools/openapi_upstream.py):
the command line that writes the files, or with --check compares them with a fresh extract."""
from __future__ import annotations

import argparse
import sys
from typing import Callable


def main(description: str, command: str, extract: Callable[[], dict[str, str]],
         argv: list[str] | None = None) -> int:
    """`extract()` -> {path: text}. Writes them, or with --check exits 1 naming each stale one."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing them")
    args = ap.parse_args(argv)
    texts = extract()
    stale = False
    for path, text in texts.items():
        if args.check:
            with open(path, encoding="utf-8") as f:
                if f.read() != text:
                    print(f"{path} is stale: run {command}", file=sys.stderr)
                    stale = True
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(path, file=sys.stderr)
    return int(stale)
