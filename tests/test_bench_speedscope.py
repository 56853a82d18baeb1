"""bench.speedscope on a profile made by hand: idle samples are the shortest stacks, busy runs are the
consecutive others, and the shares count each busy sample once per function."""
from __future__ import annotations

from bench.speedscope import summarize


def test_busy_runs_and_shares():
    frames = [{"name": "run", "file": "/x/runners.py", "line": 1},
              {"name": "renew", "file": "/x/rawpath.py", "line": 10},
              {"name": "write", "file": "/x/rawpath.py", "line": 20},
              {"name": "forward", "file": "/x/forwarder.py", "line": 5}]
    idle, renew, write, fwd = [0], [0, 1], [0, 1, 2], [0, 3]
    # at 100 Hz: a 30 ms run (renew, write, write), idle, a 10 ms run (forward), idle, a 20 ms run at the end
    samples = [idle, renew, write, write, idle, fwd, idle, idle, renew, fwd]
    doc = {"shared": {"frames": frames}, "profiles": [{"samples": [idle]}, {"samples": samples}]}
    out = summarize(doc, rate=100, min_ms=20, top=10)
    assert out[0] == "samples 10 at 100 Hz, busy 6 (0.600)"
    assert out[1] == "busy runs 3: p50 20 ms, p99 30 ms, max 30 ms"
    assert out[2] == "runs of at least 20 ms: 2, 0.05 s in all"
    assert "       4 renew (rawpath.py:10)" in out and "       1 forward (forwarder.py:5)" in out
    i = out.index("busy samples by function, inclusive:")
    assert out[i + 1:i + 4] == ["   66.7 % renew (rawpath.py)", "   33.3 % write (rawpath.py)",
                                "   33.3 % forward (forwarder.py)"]
    assert sorted(out[-3:]) == ["   33.3 % forward (forwarder.py:5)", "   33.3 % renew (rawpath.py:10)",
                                "   33.3 % write (rawpath.py:20)"]      # (self: the top frame's line)
