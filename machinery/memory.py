"""Process memory: handing freed heap back to the OS."""
from __future__ import annotations


def release_free_memory() -> None:
    """Give freed heap back to the OS (glibc's malloc_trim): after a (re)list or a build whose temporaries are
    garbage now, glibc would keep their pages, and RSS would reflect the peak rather than what is held."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def malloc_info() -> dict[str, int]:
    """glibc's own account of its heap (mallinfo2): `malloc_arena_bytes` obtained with brk/sbrk and per-thread
    arenas, `malloc_in_use_bytes` of it allocated, `malloc_free_bytes` free but kept (what RSS holds beyond
    the heap's live bytes unless malloc_trim could give it back), `malloc_mmap_bytes` in large mmapped chunks.
    Empty where the C library is not glibc >= 2.33."""
    try:
        import ctypes

        class _Mallinfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                         "fsmblks", "uordblks", "fordblks", "keepcost")]
        f = ctypes.CDLL("libc.so.6").mallinfo2
        f.restype = _Mallinfo2
        m = f()
    except (OSError, AttributeError):
        return {}
    return {"malloc_arena_bytes": m.arena, "malloc_in_use_bytes": m.uordblks, "malloc_free_bytes": m.fordblks,
            "malloc_mmap_bytes": m.hblkhd}
