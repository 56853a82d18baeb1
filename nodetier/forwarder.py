"""What keeps the tier's Leases and the control plane's in step.

* **Load.** At start the tier lists the namespace's Leases from the control plane (and again after its watch
  of them expired); until then it is not ready.
* **Forward.** A renewal the tier holds reaches the control plane once it is about `interval` newer than the
  control plane's copy (at the kubelet's 10.2 s period and the default 30 s: every third renewal, so the
  control plane's copy is at most ~31 s old against the 40 s Lease and the 50 s grace period of the node
  lifecycle controller), or before the control plane's copy is 32 s old (`_cap`: a Lease whose renewals are
  out of step with its control-plane copy, just created, loaded or changed elsewhere, would otherwise wait for
  the renewal after the threshold, up to 35 s), or at once when the Lease's next renewal is overdue (1.1
  renewal periods since the last: its kubelet may have stopped, and its last renewal must not wait). A Lease
  out of step sends its first, second or third renewal by a hash of its name (`_threshold`), so Leases whose
  copies were made together do not forward together ever after. At most
  `qps` forwards a second, or the rate of renewals absorbed over the last RATE_WINDOW seconds where that is more
  (the steady state needs a third of it on average, but all of it while Leases whose forwards fell into step are due together: a fixed
  500 a second held back every Lease beyond 15,000 nodes, half the rate aged some copies to 40 s), the longest
  due first, so a control plane back from an outage does not get every Lease at once; at most `concurrency` (192)
  in flight, the Leases due beyond them waiting in the heap (at 30,000 nodes a forward's round trip on a busy
  machine was 0.1-0.15 s: 64 in flight capped the control plane at 400-600 of the ~980 forwards a second due).
  Each Lease's next due time is computed when its state changes and kept in a heap: a tick (every TICK) sends
  what is due, together (one by one as renewals came, each forward cost the apiserver and etcd about twice the
  CPU), and costs what is due, not a scan of every Lease (at 23,000 Leases the scan every 0.25 s was a quarter
  of the tier's CPU). A sweep
  every SWEEP seconds re-schedules every Lease (SWEEP_SLICE per wake), in case a change was not seen.
* **Watch.** Changes made at the control plane by someone else (an edit, a delete by the garbage collector)
  reach the tier through a watch of the namespace's Leases; a newer renewal the tier holds is kept and
  forwarded.
* **Stop.** The newest renewal of every Lease still pending is forwarded before the tier exits.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import deque
from typing import Callable

from machinery.aio import wait_event

from . import metrics
from .controlplane import ControlPlane, ControlPlaneError
from .leases import LeaseState, TierLeases, for_control_plane, renew_time, without_renewal

log = logging.getLogger("nodetier")

OVERDUE_SHARE = 1.1      # a renewal later than 1.1 periods after the last one is overdue
TICK = 0.1               # how often the forwarder looks for due Leases (and sends them, together)
RETRY_AFTER = 1.0        # after a failed forward
SWEEP = 10.0             # every Lease re-scheduled (a safety net: each change schedules its Lease)
SWEEP_SLICE = 500        # ... this many per wake of the forward loop (it wakes at least every TICK)
RATE_WINDOW = 10.0       # seconds over which the renewal rate that scales the forward budget is counted
RATE_SHARE = 1.0         # forwards a second may reach this share of that rate: a forward follows a renewal, so
                         # the steady state never waits, however the Leases' forward phases bunch up (at half the
                         # rate, Leases created together bunched up and the control plane's copies aged to 40 s)
RENEW_JITTER = 0.04      # a kubelet's renewal period is jittered up to 4 % longer (nodelease.go: JitterUntil)
CAP_SLACK = 0.8          # seconds beyond the in-step age at which the control plane's copy is forwarded anyway
EVENT_WINDOW = 60.0      # seconds of the tier's own history kept for its watchers (older: 410)
COMPACT_EVERY = 0.5      # seconds between compactions of that history: each holds the loop for what it forgets
                         # (every 5 s at 31,000 nodes: 15,000 events, 31-39 ms measured alone, each time)


class Forwarder:
    def __init__(self, leases: TierLeases, cp: ControlPlane, *, interval: float = 30.0, qps: float = 500.0,
                 concurrency: int = 192, owns: Callable[[str], bool] = lambda _name: True):
        self.leases, self.cp = leases, cp
        self.owns = owns            # this tier's Leases (nodetier.split): the others are other tiers' to hold
        self.interval, self.qps = interval, qps
        self.concurrency = concurrency
        self._sem = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._retry_at: dict[str, float] = {}
        self._tasks: list[asyncio.Task] = []
        self._forwards: set[asyncio.Task] = set()
        # (monotonic due time, tie-breaker, name); an entry whose time is not its Lease's `due_at` is stale
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self.renewals = 0                                   # absorbed since the start (the budget's rate)
        self.loaded = asyncio.Event()
        leases.on_state = self.schedule

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._sync_forever()), asyncio.create_task(self._forward_forever()),
                       asyncio.create_task(self._compact_forever())]

    async def stop(self, flush_timeout: float = 5.0) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.loaded.is_set():
            await self.flush(flush_timeout)

    # --- load and watch ---------------------------------------------------------------------------

    async def load(self) -> int:
        """The control plane's Leases become the tier's (a newer renewal held here is kept); Leases the
        control plane no longer has are dropped. Returns the list's resourceVersion."""
        items, rv = await self.cp.list_leases()
        names = set()
        for obj in items:
            name = obj["metadata"]["name"]
            if not self.owns(name):
                continue
            names.add(name)
            await self.leases.adopt(name, obj)
        for name in [n for n in self.leases.states if n not in names]:
            await self.leases.forget(name)
        self.loaded.set()
        log.info("loaded %d of %d leases from the control plane at resourceVersion %d", len(names), len(items), rv)
        return rv

    async def _sync_forever(self) -> None:
        rv = 0
        while True:
            try:
                if not rv:
                    rv = await self.load()
                async for ev in self.cp.watch_leases(rv):
                    rv = await self._apply(ev, rv)
            except ControlPlaneError as e:
                log.warning("control plane watch of leases: %s", e)
                await asyncio.sleep(1.0)
            except _Expired:
                rv = 0

    async def _apply(self, ev: dict, rv: int) -> int:
        typ, obj = ev.get("type"), ev.get("object") or {}
        if typ == "ERROR":
            if obj.get("code") == 410:
                raise _Expired()
            raise ControlPlaneError(int(obj.get("code") or 0), obj)
        new_rv = int((obj.get("metadata") or {}).get("resourceVersion") or rv)
        if typ == "BOOKMARK":
            return new_rv
        name = obj["metadata"]["name"]
        if not self.owns(name):
            return new_rv
        if typ == "DELETED":
            await self.leases.forget(name)
            return new_rv
        st = self.leases.states.get(name)
        if st is not None and new_rv <= st.cp_rv:
            return new_rv                       # a forward of ours already answered with it
        if st is not None and await self._ours(name, obj):
            self.leases.note_control_plane(name, obj)
            return new_rv
        await self.leases.adopt(name, obj)      # someone else's change (or a Lease created elsewhere)
        return new_rv

    async def _ours(self, name: str, cp_obj: dict) -> bool:
        """The event is a forward of the tier's (its answer not yet read): the same Lease, an older or equal
        renewal."""
        try:
            mine = await self.leases.store.get(self.leases.prefix + name)
        except Exception:  # noqa: BLE001 (gone here: not ours)
            return False
        return without_renewal(mine) == without_renewal(cp_obj) and renew_time(cp_obj) <= renew_time(mine)

    # --- forward ----------------------------------------------------------------------------------

    def _threshold(self, st: LeaseState) -> float:
        """How much newer than the control plane's copy a renewal must be to go: half a period short of the
        interval in step. Out of step (the copy was made by a create, a load, a change elsewhere) the Lease's
        `phase` picks the first, second or third renewal instead: Leases whose copies were made together
        (created together, or all loaded by a tier that restarted) would otherwise send their renewals
        together every interval for good, and a control plane that takes them at 1,000 a second aged the
        last of 30,000 to 38 s (leasegen creates its Leases in one burst); spread, the forwards stay even.
        It costs one early forward per Lease out of step, none in step."""
        p = st.renew_period
        span = min(self.interval, 3 * p)
        if st.in_step:
            return span - p / 2
        return span - p / 2 - (st.phase % max(1, round(span / p))) * p     # the renewals per interval

    def _cap(self, st: LeaseState) -> float:
        """The oldest the control plane's copy gets while the tier holds a newer renewal: the age at which a
        kubelet renewing in step with that copy reaches the interval (its period up to 4 % longer), plus
        CAP_SLACK; 32 s at the defaults. In step, the renewal that crosses the threshold comes before it, so
        the cap never sends an older one. Out of step (renewals 3, 13, 23, 33 s after the copy), the renewal
        whose successor would come past the cap (23 s) goes as it arrives, instead of the next one at 33-35 s,
        and the next cycle is in step. (Sent at the cap instead, the Leases created together went together
        and queued behind the forward budget: 32-34 s at 5,000 nodes.) The cap itself is the bound for a
        kubelet renewing late."""
        return (1 + RENEW_JITTER) * min(self.interval, 3 * st.renew_period) + CAP_SLACK

    def due(self, st: LeaseState, now: float, mono: float) -> bool:
        """A renewal newer than the control plane's copy goes when it is about `interval` newer than that copy
        (half a renewal period early: the renewal that arrives closest to the interval is the one sent, so at
        a 10.2 s period and 30 s every third one is, and the control plane's copy is never more than ~31 s
        old), or before the control plane's copy is `_cap` old (a kubelet out of step, or renewing late), or
        when the next renewal is overdue. The interval is at most three renewal periods (30 s of a 40 s Lease)."""
        at = self.next_due(st, now, mono)
        return at is not None and at <= mono

    def next_due(self, st: LeaseState, now: float, mono: float) -> float | None:
        """When (monotonic) the Lease is due if nothing else changes (the rules of `due`): `mono` if it is
        due now, None if nothing is pending or a forward is in flight (its end schedules the Lease again)."""
        if not st.pending or st.in_flight:
            return None
        p = st.renew_period
        threshold = self._threshold(st)
        ahead, cap = st.tier_renew - st.cp_renew, self._cap(st)
        if ahead >= threshold or ahead > cap - (1 + RENEW_JITTER) * p:
            return mono             # crossed the threshold, or out of step: its next one would come past the cap
        return max(mono, min(mono + (st.cp_renew + cap - now), st.renewed_at + OVERDUE_SHARE * p))

    def schedule(self, name: str, not_before: float = 0.0) -> None:
        """(Re)compute when the Lease is next due; called on every change of its state."""
        st = self.leases.states.get(name)
        if st is None:
            return
        mono = time.monotonic()
        at = self.next_due(st, time.time(), mono)
        if at is None:
            return
        at = max(at, self._retry_at.get(name, 0.0), not_before)
        if st.due_at is not None and st.due_at <= at:
            return              # an earlier entry is queued: popped, it re-schedules if it is not due yet
        st.due_at = at
        heapq.heappush(self._heap, (at, next(self._seq), name))
        # No wake-up for a Lease due now: the loop takes what is due every TICK, together. Sent one by one as
        # renewals came (they come spread out once the Leases' phases are), a forward cost the apiserver and
        # etcd about 1.9x the CPU at 10,000 nodes (each alone through their loops; together, one write to etcd
        # and one Raft batch serve many), for at most TICK less age at the control plane against a 40 s budget.

    def on_renewal(self, name: str) -> None:
        self.renewals += 1
        self.schedule(name)

    async def _forward_forever(self) -> None:
        await self.loaded.wait()
        budget, last, swept = 0.0, time.monotonic(), 0.0
        sweeping: list[str] = []            # the Leases the current sweep has yet to re-schedule
        heap, states = self._heap, self.leases.states
        counts: deque[tuple[float, int]] = deque([(last, self.renewals)])
        while True:
            await wait_event(self._wake, TICK)
            self._wake.clear()
            mono = time.monotonic()
            if mono - counts[-1][0] >= TICK:     # a sample per tick: a finished forward wakes this loop too
                counts.append((mono, self.renewals))      # (~850 times a second at 30,000 nodes)
                while counts[0][0] < mono - RATE_WINDOW:
                    counts.popleft()
            rate = (self.renewals - counts[0][1]) / max(1.0, mono - counts[0][0])
            qps = max(self.qps, RATE_SHARE * rate)
            budget = min(qps, budget + (mono - last) * qps)   # a token bucket of one second
            last = mono
            if not sweeping and mono - swept >= SWEEP:
                swept, sweeping = mono, list(states)
            if sweeping:    # a slice per wake: all 20,000 Leases at once held the loop 24 ms (measured alone)
                for name in sweeping[-SWEEP_SLICE:]:
                    self.schedule(name)
                del sweeping[-SWEEP_SLICE:]
            now = time.time()
            # Never more forwards than run at once: the due Leases beyond them wait in the heap (a tuple each),
            # not as tasks queued on the semaphore (~15 objects each for the garbage collector: at 30,000 nodes
            # and a control plane taking 700 of the 980 forwards a second, 18,000 such tasks made each full
            # collection 0.25 s, 13 % of the tier's time, and every renewal waited for it).
            while heap and heap[0][0] <= mono and budget >= 1 and len(self._forwards) < self.concurrency:
                at, _, name = heapq.heappop(heap)
                st = states.get(name)
                if st is None or st.due_at != at:
                    continue                                    # stale: re-scheduled or gone since
                st.due_at = None
                if self._retry_at.get(name, 0.0) <= mono and self.due(st, now, mono):
                    budget -= 1
                    metrics.forward_wait_seconds.observe(mono - at)
                    self._spawn(name)
                else:
                    self.schedule(name, not_before=mono + TICK)

    def _spawn(self, name: str) -> None:
        st = self.leases.states[name]
        st.in_flight = True
        t = asyncio.create_task(self.forward(name))
        self._forwards.add(t)
        t.add_done_callback(self._forward_done)

    def _forward_done(self, t: asyncio.Task) -> None:
        full = len(self._forwards) >= self.concurrency
        self._forwards.discard(t)
        if full and self._heap and self._heap[0][0] <= time.monotonic():
            self._wake.set()        # due Leases waited for a slot: one is free, no need to wait for the tick

    async def forward(self, name: str) -> bool:
        """Send the tier's newest copy of the Lease (a bare renewal: the tier's own version is unchanged)."""
        st = self.leases.states.get(name)
        if st is None:
            return False
        replaced, t0 = st.cp_renew, time.monotonic()
        try:
            async with self._sem:
                obj = await self.leases.store.get(self.leases.prefix + name)
                cp_obj = await self.cp.call("PUT", self.cp.lease_path(name), for_control_plane(obj, st.cp_rv),
                                            user_agent=st.user_agent)
            metrics.forward_seconds.observe(time.monotonic() - t0)
            if replaced:
                metrics.control_plane_age.observe(time.time() - replaced)
            self.leases.note_control_plane(name, cp_obj)
            st.in_step = True
            metrics.forwards.labels("renewal", "ok").inc()
            self._retry_at.pop(name, None)
            return True
        except ControlPlaneError as e:
            metrics.forwards.labels("renewal", str(e.status or "unreachable")).inc()
            if e.status == 409:
                try:
                    await self.leases.adopt(name, await self.cp.call("GET", self.cp.lease_path(name)))
                except ControlPlaneError as e2:
                    if e2.status == 404:
                        await self.leases.forget(name)
            elif e.status == 404:
                await self.leases.forget(name)
            else:
                log.warning("forward of lease %s failed: %s", name, e)
            self._retry_at[name] = time.monotonic() + RETRY_AFTER
            return False
        except Exception as e:  # noqa: BLE001 (gone here meanwhile, or any failure: the next tick retries)
            log.debug("forward of lease %s: %r", name, e)
            self._retry_at[name] = time.monotonic() + RETRY_AFTER
            return False
        finally:
            st.in_flight = False
            self.schedule(name)     # a renewal absorbed meanwhile, or a retry

    async def flush(self, timeout: float) -> int:
        """Forward every pending renewal now (at the rate limit), within `timeout` seconds (what is still in
        flight then is cancelled: a control plane too slow to take them must not hold the tier's exit); how
        many did not go."""
        pending: list[tuple[float, str]] = []
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*self._forwards, return_exceptions=True)
                pending = sorted((st.cp_renew, n) for n, st in self.leases.states.items() if st.pending)
                step = max(1, int(self.qps))
                for i in range(0, len(pending), step):
                    t0 = time.monotonic()
                    await asyncio.gather(*(self.forward(n) for _, n in pending[i:i + step]))
                    await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
        except TimeoutError:
            pass
        left = sum(1 for st in self.leases.states.values() if st.pending)
        log.info("stop: %d lease renewals forwarded, %d not", len(pending) - left, left)
        return left

    # --- the tier's own history -------------------------------------------------------------------

    async def _compact_forever(self) -> None:
        """Keep EVENT_WINDOW seconds of the tier's revisions for its watchers (etcd keeps 5 minutes upstream,
        but the tier's history is all renewals: a minute of them at 10,000 nodes is 60,000 versions)."""
        marks: deque[tuple[float, int]] = deque()
        kv = self.leases.kv
        while True:
            await asyncio.sleep(COMPACT_EVERY)
            now = time.monotonic()
            marks.append((now, kv.revision))
            while marks and marks[0][0] < now - EVENT_WINDOW:
                kv.compact_to(marks.popleft()[1])


class _Expired(Exception):
    """The control plane's watch said 410: list again."""
