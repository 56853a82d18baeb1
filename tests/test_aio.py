"""machinery/aio.py: a background loop that waits on an Event with a timeout stops when cancelled, whenever
the cancellation lands (the shutdown hang of 2026-12-01: a Compressor loop outlived `task.cancel()`)."""
from __future__ import annotations

import asyncio
import sys

import pytest

from machinery.aio import wait_event


async def _wait_for(event: asyncio.Event, timeout: float) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        pass


async def _survivors(waiter, spins: int) -> int:
    """Cancel a `while True: wait; clear` loop right after setting its event, `spins` loop iterations later;
    1 if the loop went on anyway (the cancellation was swallowed), 0 if it stopped."""
    ev = asyncio.Event()
    passes = 0

    async def background() -> None:
        nonlocal passes
        while True:
            await waiter(ev, 30)
            ev.clear()
            passes += 1

    task = asyncio.create_task(background())
    await asyncio.sleep(0.01)
    ev.set()
    for _ in range(spins):
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0.05)
    survived = not task.done()
    if survived:   # clean up the loop the cancellation missed
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return int(survived)


def test_wait_event_never_swallows_a_cancellation():
    got = [asyncio.run(_survivors(wait_event, spins)) for spins in range(6)]
    assert got == [0] * 6, got


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for no longer swallows cancellations (gh-86296)")
def test_the_stdlib_wait_for_swallows_one_here():
    """Why the project does not use wait_for: on 3.11 one of these timings survives `cancel()`."""
    got = [asyncio.run(_survivors(_wait_for, spins)) for spins in range(6)]
    assert 1 in got, got


def test_wait_event_times_out_and_reports_a_set_event():
    async def run():
        ev = asyncio.Event()
        assert await wait_event(ev, 0.01) is False
        asyncio.get_running_loop().call_later(0.01, ev.set)
        assert await wait_event(ev, 5) is True
        assert await wait_event(ev, None) is True   # already set: no wait
    asyncio.run(run())
