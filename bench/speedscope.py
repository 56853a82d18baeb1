"""`python -m bench.speedscope FILE [--rate HZ] [--min-ms MS] [--top N]`: where an event loop's time goes, from a
py-spy profile recorded with idle samples, in time order (`py-spy record --idle -f speedscope -r HZ -p PID`).

A sample whose stack is only the loop's own frames (the shortest stacks: the thread waits in epoll) is idle;
every other sample is busy: running Python, or runnable and waiting for a core (py-spy samples the stack either
way, so a busy share above the process's CPU share is time spent waiting for a core). Prints the busy share,
the runs of consecutive busy samples (how long the loop went without waiting: a request arriving then waits
for the run's end), which functions ran in the long runs, and the busy samples' shares by function.
"""
from __future__ import annotations

import argparse
import collections
import json


def _name(frame: dict, line: bool = True) -> str:
    f = frame.get("file", "").rsplit("/", 1)[-1]
    return f"{frame['name']} ({f}:{frame.get('line')})" if line else f"{frame['name']} ({f})"


def summarize(doc: dict, rate: float, min_ms: float, top: int) -> list[str]:
    frames = doc["shared"]["frames"]
    samples = max(doc["profiles"], key=lambda p: len(p["samples"]))["samples"]   # the main thread's
    base = min(len(s) for s in samples)
    ms = 1000.0 / rate
    runs: list[list[list[int]]] = []
    cur: list[list[int]] = []
    for s in samples:
        if len(s) <= base:
            if cur:
                runs.append(cur)
                cur = []
        else:
            cur.append(s)
    if cur:
        runs.append(cur)
    busy = [s for r in runs for s in r]
    out = [f"samples {len(samples)} at {rate:g} Hz, busy {len(busy)} ({len(busy) / len(samples):.3f})"]
    if not runs:
        return out
    lens = sorted(len(r) * ms for r in runs)
    out.append(f"busy runs {len(runs)}: p50 {lens[len(lens) // 2]:.0f} ms, p99 {lens[int(len(lens) * 0.99)]:.0f} ms, "
               f"max {lens[-1]:.0f} ms")
    long = [r for r in runs if len(r) * ms >= min_ms]
    out.append(f"runs of at least {min_ms:g} ms: {len(long)}, {sum(len(r) for r in long) * ms / 1000:.2f} s in all")
    entry = collections.Counter(_name(frames[s[min(len(s) - 1, base)]]) for r in long for s in r)
    out.append("  what they ran (the frame below the loop's, samples):")
    out += [f"  {v:6d} {k}" for k, v in entry.most_common(top // 2)]
    incl: collections.Counter = collections.Counter()
    own: collections.Counter = collections.Counter()
    for s in busy:
        incl.update({_name(frames[f], line=False) for f in s})
        own[_name(frames[s[-1]])] += 1
    n = len(busy)
    out.append("busy samples by function, inclusive:")
    out += [f"  {100 * v / n:5.1f} % {k}" for k, v in incl.most_common(top) if v < n]
    out.append("busy samples by line, self:")
    out += [f"  {100 * v / n:5.1f} % {k}" for k, v in own.most_common(top // 2)]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.speedscope", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--rate", type=float, default=250.0, help="the sampling rate given to py-spy (-r)")
    ap.add_argument("--min-ms", type=float, default=20.0, help="a busy run this long or longer is a long one")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args(argv)
    with open(a.file) as f:
        print("\n".join(summarize(json.load(f), a.rate, a.min_ms, a.top)))


if __name__ == "__main__":
    main()
