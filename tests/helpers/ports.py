"""Runs of consecutive loopback ports for tests that narrow RESIDENCY_PORT_RANGE to a few ports of their own."""
from __future__ import annotations

import os
import socket


def free_runs(n: int, count: int) -> list[int]:
    """The first ports of `count` runs of n consecutive ports of this worker's range (RESIDENCY_PORT_RANGE, its
    own slice of the suite's ports: another worker's servers are never in it), all free now (from the top of
    the range down: the suite's own picks walk from random places)."""
    lo, hi = (int(x) for x in os.environ["RESIDENCY_PORT_RANGE"].split("-"))
    out, base = [], hi - n
    while len(out) < count and base > lo:
        socks = []
        try:
            for p in range(base, base + n):
                socks.append(socket.socket())
                socks[-1].bind(("127.0.0.1", p))
            out.append(base)
            base -= n
        except OSError:
            base -= 1
        finally:
            for sock in socks:
                sock.close()
    return out
