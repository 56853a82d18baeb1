"""The memory a group of processes occupies: every physical page mapped by any of them, counted once.

Summing RSS counts a shared library's pages once per process that maps it; summing PSS divides them among every
process on the machine that maps them, the benchmark's other servers and clients included, so it depends on what
else runs. The union of the group's physical frames (/proc/PID/pagemap; the frame numbers are readable as root,
else every frame reads as 0 and `group_bytes` returns None) is what the group would occupy on a machine of its
own: what a deployment of several processes costs against one process's RSS (issue 21: memory of a deployment).
"""
from __future__ import annotations

import array
import mmap

PAGE = mmap.PAGESIZE
_PRESENT = 1 << 63
_PFN = (1 << 55) - 1


def frames(pid: int) -> set[int]:
    """The physical frame numbers of `pid`'s resident pages (swapped-out pages are not counted)."""
    out: set[int] = set()
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pm:
        for line in maps:
            span = line.split(maxsplit=1)[0]
            if line.rstrip().endswith("[vsyscall]"):
                continue   # outside the process's page tables; reading it fails
            lo, hi = (int(x, 16) for x in span.split("-"))
            pm.seek(lo // PAGE * 8)
            entries = array.array("Q")
            entries.frombytes(pm.read((hi - lo) // PAGE * 8))
            out.update(e & _PFN for e in entries if e & _PRESENT)
    return out


def group_bytes(pids: list[int]) -> int | None:
    """Bytes of the pages resident in any of `pids`, each page once; None if frame numbers are hidden
    (not root) or a process is gone."""
    union: set[int] = set()
    try:
        for pid in pids:
            union |= frames(pid)
    except OSError:
        return None
    if union and union <= {0}:
        return None
    return len(union) * PAGE
