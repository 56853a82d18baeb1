"""machinery.pauses: the garbage collector's pauses and the event loop's lag, as /metrics exposes them."""
import asyncio
import gc
import time

from machinery.metrics import Registry
from machinery.pauses import BUCKETS, LAG_PERIOD, Pauses


def _scrape(p: Pauses) -> str:
    reg = Registry(process=False)
    reg.register(p)
    return reg.expose().decode()


def test_every_collection_is_timed_in_its_generation():
    p = Pauses()
    was_enabled = gc.isenabled()
    gc.disable()                        # only the collections asked for below
    gc.callbacks.append(p.gc_callback)
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        gc.callbacks.remove(p.gc_callback)
        if was_enabled:
            gc.enable()
    assert sum(p.gc[2].counts) == 2
    assert sum(p.gc[0].counts) == 1
    assert p.gc[2].sum > 0
    text = _scrape(p)
    assert 'python_gc_duration_seconds_count{generation="2"} 2.0' in text
    assert 'python_gc_duration_seconds_bucket{generation="2",le="+Inf"} 2.0' in text


def test_a_blocked_loop_shows_as_lag():
    p = Pauses()

    async def run():
        p.start_lag()
        await asyncio.sleep(LAG_PERIOD * 1.5)     # the sampler's first sleep is under way
        time.sleep(0.3)                           # the loop is blocked: the sampler wakes ~0.25 s late
        await asyncio.sleep(LAG_PERIOD * 2)
        p._lag_task.cancel()

    asyncio.run(run())
    late = [b for b, n in zip((*BUCKETS, float("inf")), p.lag.counts) if n and b >= 0.1]
    assert late, p.lag.counts
    assert p.lag.sum >= 0.15
    text = _scrape(p)
    count = [ln for ln in text.splitlines() if ln.startswith("python_event_loop_lag_seconds_count")]
    assert count and float(count[0].split()[-1]) >= 2


def test_fewer_collections_sets_the_young_and_the_full_thresholds():
    """The tier's thresholds (pauses.fewer_collections): the youngest generation after 10,000 new objects, a
    full collection after 100 of the middle one; the middle generation's own threshold is CPython's."""
    from machinery.pauses import fewer_collections
    before = gc.get_threshold()
    try:
        fewer_collections()
        assert gc.get_threshold() == (10_000, before[1], 100)
        fewer_collections(2_000, 50)
        assert gc.get_threshold() == (2_000, before[1], 50)
    finally:
        gc.set_threshold(*before)
