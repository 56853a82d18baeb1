"""bench.procmem: a group's memory counts each physical page once (issue 21: a deployment's memory)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.harness import proc_status_kib
from bench.procmem import frames, group_bytes

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/pagemap") or group_bytes([os.getpid()]) is None,
                                reason="physical frame numbers need Linux and root")


def test_one_process_is_its_rss():
    rss = proc_status_kib(os.getpid())["VmRSS"] * 1024
    got = group_bytes([os.getpid()])
    assert abs(got - rss) <= 0.02 * rss + (1 << 20), (got, rss)


def test_two_interpreters_share_their_library_pages_once():
    # Two fresh interpreters map the same libpython and shared libraries: counted once, not twice.
    code = "import sys, json, ssl; sys.stdout.write('up\\n'); sys.stdout.flush(); sys.stdin.read()"
    ps = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
          for _ in range(2)]
    try:
        for p in ps:
            assert p.stdout.readline() == b"up\n"
        each = [len(frames(p.pid)) for p in ps]
        both = group_bytes([p.pid for p in ps])
        assert both < sum(each) * os.sysconf("SC_PAGE_SIZE") - (1 << 20)
        assert both >= max(each) * os.sysconf("SC_PAGE_SIZE")
    finally:
        for p in ps:
            p.stdin.close()
            p.wait(10)
            p.stdout.close()


def test_a_process_gone_is_none():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert group_bytes([p.pid]) is None
