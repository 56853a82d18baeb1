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
