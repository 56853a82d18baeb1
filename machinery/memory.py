"""Process memory: one malloc arena, and handing freed heap back to the OS."""
from __future__ import annotations

import functools
import os

M_ARENA_MAX = -8   # glibc's mallopt parameter (malloc.h)


def limit_malloc_arenas(arenas: int = 1) -> bool:
    """Let every thread allocate from glibc's main arena (mallopt M_ARENA_MAX), unless MALLOC_ARENA_MAX says
    otherwise; call it before any thread starts. By default glibc gives each thread an arena of its own at its first
    allocation (up to 8 per core), and memory freed in those arenas stayed resident: a
    server loaded with 10,000 ConfigMaps, once their cold entries were compressed (the worker thread makes and
    drops a compression context and a zstd-bound buffer per frame), held 2,190-2,406 B of RSS per object with
    1,839-1,901 B of it in anonymous mappings; with one arena, 1,057-1,220 B (an ad hoc script reading
    /debug/residency and /proc/PID/smaps, two or three runs each). This process's threads are few (the event loop does
    nearly all the allocating; gRPC's poller and the compression, checksum and executor workers), so they rarely
    wait for the one arena's lock. Returns whether the limit was set."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False   # glibc read it at start-up: the operator's choice stands
    libc = _glibc()
    return libc is not None and hasattr(libc, "mallopt") and bool(libc.mallopt(M_ARENA_MAX, arenas))


@functools.cache
def _glibc():
    """The C library through ctypes (loaded once), or None where it cannot be loaded under glibc's name."""
    try:
        import ctypes
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def release_free_memory() -> None:
    """Give freed heap back to the OS (glibc's malloc_trim): after a (re)list or a build whose temporaries are
    garbage now, glibc would keep their pages, and RSS would reflect the peak rather than what is held."""
    libc = _glibc()
    if libc is not None and hasattr(libc, "malloc_trim"):   # else not glibc: nothing to do
        libc.malloc_trim(0)


def malloc_info() -> dict[str, int]:
    """glibc's own account of its heap (mallinfo2): `malloc_arena_bytes` obtained with brk/sbrk and per-thread
    arenas, `malloc_in_use_bytes` of it allocated, `malloc_free_bytes` free but kept (what RSS holds beyond
    the heap's live bytes unless malloc_trim could give it back), `malloc_mmap_bytes` in large mmapped chunks.
    Empty where the C library is not glibc >= 2.33."""
    import ctypes
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return {}

    class _Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]
    f = libc.mallinfo2
    f.restype = _Mallinfo2
    m = f()
    return {"malloc_arena_bytes": m.arena, "malloc_in_use_bytes": m.uordblks, "malloc_free_bytes": m.fordblks,
            "malloc_mmap_bytes": m.hblkhd}
