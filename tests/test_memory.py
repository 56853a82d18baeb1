"""The apiserver's threads allocate from glibc's main arena (machinery/memory.py `limit_malloc_arenas`).

glibc gives a thread its own arena at its first allocation (up to 8 per core), each a 64 MiB reservation of
which what was used and freed stayed resident: a server's RSS per cold ConfigMap halved with one arena. An
arena's reservation shows in /proc/PID/maps as an anonymous PROT_NONE mapping of about 63 MiB, which is what
these tests look for (a thread's stack guard is one page).
"""
from __future__ import annotations

import os
import subprocess
import sys
import urllib.request

from tests.helpers.apiserver import ApiserverProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = r"""
import sys, threading
from machinery.memory import limit_malloc_arenas
limited = limit_malloc_arenas() if sys.argv[1] == "limit" else None
def reserved():
    tot = 0
    for line in open("/proc/self/maps"):
        f = line.split()
        if f[1] == "---p" and len(f) == 5:
            a, b = (int(x, 16) for x in f[0].split("-"))
            tot += b - a
    return tot
r0 = reserved()
keep = []
t = threading.Thread(target=lambda: keep.extend(b"x" * 2000 + bytes([i % 256]) for i in range(1000)))
t.start(); t.join()
print(limited, (reserved() - r0) >> 20)
"""


def _probe(mode: str, **env: str) -> tuple[str, int]:
    e = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, env=e, capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0], int(out[1])


def _arena_reservations(pid: int) -> list[int]:
    """Sizes (MiB) of the anonymous PROT_NONE mappings of at least 16 MiB: glibc's thread arenas."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split()
            if fields[1] == "---p" and len(fields) == 5:
                a, b = (int(x, 16) for x in fields[0].split("-"))
                if b - a >= 16 << 20:
                    out.append((b - a) >> 20)
    return out


def test_a_thread_gets_an_arena_of_its_own_unless_limited():
    limited, mib = _probe("none")
    assert limited == "None" and mib >= 32                   # glibc's default: a 64 MiB heap for the thread
    assert _probe("limit") == ("True", 0)                    # the thread allocates from the main arena
    limited, mib = _probe("limit", MALLOC_ARENA_MAX="4")
    assert limited == "False" and mib >= 32                  # the operator's setting stands


def test_the_apiserver_allocates_from_one_arena():
    """A serving apiserver (embedded etcd, its gRPC, executor and compression threads running) has no thread
    arena; with MALLOC_ARENA_MAX set, glibc's own choice applies (the control: the probe would see them)."""
    def serving(**kw) -> list[int]:
        with ApiserverProcess(**kw) as a:
            for _ in range(20):
                with urllib.request.urlopen(a.base + "/api/v1/namespaces/default/configmaps", timeout=10) as r:
                    r.read()
            return _arena_reservations(a.pid)

    assert serving() == []
    assert len(serving(env={"MALLOC_ARENA_MAX": "16"})) >= 1
