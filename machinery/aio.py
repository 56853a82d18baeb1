"""asyncio helpers where the standard library gets it wrong on Python 3.11.

`asyncio.wait_for(aw, t)` swallows a cancellation that arrives once `aw` has finished but before wait_for
resumed (3.11's wait_for then returns the inner result; fixed in 3.12, cpython gh-86296). A background loop
written `while True: await wait_for(event.wait(), t)` can so outlive `task.cancel()`, and the apiserver's
shutdown waited for it forever (the CI hang of 2026-12-01; tests/test_aio.py reproduces it). The project
uses `asyncio.timeout` instead, which tells its own cancellation from another's (Task.uncancel).
"""
from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until `event` is set (True) or `timeout` seconds pass (False; None: no limit); a cancellation of
    the caller always propagates."""
    if not event.is_set():
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            pass
    return event.is_set()
