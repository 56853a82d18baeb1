"""`python -m shardslice up ...` (a whole local slice) or `python -m shardslice controller ...` (one replica)."""
from __future__ import annotations

import sys

USAGE = """usage: python -m shardslice {up,controller} [options]

  up          a name for `python -m recipes up slice`: etcd, K resident shards behind a front, K controllers
  controller  one controller replica pinned to one shard's hash range

`python -m shardslice <command> --help` for the options."""


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "up":
        from shardslice.launcher import up
        return up(rest)
    if cmd == "controller":
        from shardslice.controller import main as controller_main
        controller_main(rest)
        return 0
    print(f"unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
