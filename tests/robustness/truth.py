"""The ground truth: one watch opened directly on etcd (with prev_kv) before any traffic, recording every
revision of the watched key range, and the states reconstructed from it."""
from __future__ import annotations

import asyncio
import bisect
import time
from dataclasses import dataclass

from storage.codec import decode_value
from storage.etcd import EtcdClient, WatchCompacted, WatchProgress


@dataclass(slots=True)
class TEvent:
    """One etcd event of the watched range: `type` PUT or DELETE, at revision `rev`."""
    rev: int
    type: str
    key: str
    name: str
    opid: str | None         # data.op of the value written (PUT) or of the value deleted (DELETE)
    create_rev: int
    created: bool            # a PUT that created the key (ADDED on a watch)

    def watch_type(self) -> str:
        return "DELETED" if self.type == "DELETE" else ("ADDED" if self.created else "MODIFIED")

    def brief(self) -> dict:
        return {"rev": self.rev, "type": self.watch_type(), "name": self.name, "op": self.opid}


def opid_of(key: str, value: bytes, uids: dict | None = None) -> str | None:
    """data.op of a stored value; its UID goes into `uids` (name -> uid: names are never reused)."""
    try:
        obj = decode_value(key, value)
    except Exception:  # noqa: BLE001 - a value we cannot decode has no op id
        return None
    if uids is not None:
        md = (obj or {}).get("metadata") or {}
        if md.get("uid") and md.get("name"):
            uids[md["name"]] = md["uid"]
    return ((obj or {}).get("data") or {}).get("op")


class Recorder:
    """Records every event under `prefix` from `start_rev` + 1 on, resuming after etcd failures from the
    last revision it knows complete (events or progress notifications), as clientv3 would."""

    def __init__(self, endpoint: str, prefix: str):
        self.endpoint = endpoint
        self.prefix = prefix
        self.client = EtcdClient(endpoint.split(","), timeout=10.0)
        self.events: list[TEvent] = []
        self.revs: list[int] = []
        self.initial: dict[str, tuple[int, str | None]] = {}   # name -> (mod_rev, opid) at start_rev
        self.uids: dict[str, str] = {}     # name -> metadata.uid (sharded reads are checked by it)
        self.start_rev = 0
        self.progress = 0          # every event with rev <= progress has been recorded
        self.reconnects = 0
        self.broken: str | None = None   # why the ground truth is incomplete (harness failure)
        self._watch = None
        self._task: asyncio.Task | None = None

    @classmethod
    def offline(cls, events: list[TEvent], initial: dict | None = None, start_rev: int = 1) -> "Recorder":
        """A recorder holding a given history, without etcd (the checkers' own tests)."""
        r = cls.__new__(cls)
        r.prefix, r.events, r.revs = "", list(events), [e.rev for e in events]
        r.initial, r.start_rev = dict(initial or {}), start_rev
        r.progress = max([start_rev] + r.revs)
        r.reconnects, r.broken = 0, None
        r.uids = {}
        return r

    def in_shard(self, selector) -> "callable":
        """name -> whether the object is in `selector`'s range (a parsed ShardSelector; None: everything)."""
        if selector is None:
            return lambda name: True
        from machinery.shard_selector import parse_shard_selector
        from tests.robustness.traffic import NAMESPACE
        sel = parse_shard_selector(selector)
        return lambda name: sel.matches(self.uids.get(name, ""), NAMESPACE)

    def name_of(self, key: str) -> str:
        return key[len(self.prefix):]

    async def start(self) -> None:
        kvs, rev, _, _ = await self.client.range(self.prefix.encode(), _end(self.prefix), revision=0)
        self.start_rev = self.progress = rev
        for kv in kvs:
            k = kv.key.decode()
            self.initial[self.name_of(k)] = (kv.mod_revision, opid_of(k, kv.value, self.uids))
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            w = self.client.watch(self.prefix.encode(), self.progress + 1, progress_notify=True)
            self._watch = w
            try:
                async for item in w:
                    if isinstance(item, WatchProgress):
                        self.progress = max(self.progress, item.revision)
                        continue
                    for ev in item:
                        self._add(ev)
                    self.progress = max(self.progress, item[-1].kv.mod_revision)
            except asyncio.CancelledError:
                raise
            except WatchCompacted as e:
                self.broken = f"the ground-truth watch was compacted at {e.compact_revision}"
                return
            except Exception:  # noqa: BLE001 - etcd down or paused: resume from what is known complete
                self.reconnects += 1
            finally:
                self._watch = None
                self.reconnects += w.resumes   # the stream resumed by itself after etcd went away
                w.close()
            await asyncio.sleep(0.2)

    def _add(self, ev) -> None:
        key = ev.kv.key.decode()
        rev = ev.kv.mod_revision
        if ev.type == "DELETE":
            op = opid_of(key, ev.prev.value) if ev.prev is not None else None
            te = TEvent(rev, "DELETE", key, self.name_of(key), op, 0, False)
        else:
            te = TEvent(rev, "PUT", key, self.name_of(key), opid_of(key, ev.kv.value, self.uids), ev.kv.create_revision,
                        ev.kv.create_revision == rev)
        if self.revs and rev <= self.revs[-1]:
            self.broken = f"the ground-truth watch went backwards: {rev} after {self.revs[-1]}"
        self.events.append(te)
        self.revs.append(rev)

    async def catch_up(self, timeout: float = 30.0) -> int:
        """Wait until everything etcd holds now is recorded; returns that revision."""
        deadline = time.monotonic() + timeout
        rev = None
        while time.monotonic() < deadline:
            try:
                rev = rev or await self.client.current_revision(self.prefix.encode())
            except Exception:  # noqa: BLE001 - etcd still coming back
                await asyncio.sleep(0.3)
                continue
            if self.progress >= rev:
                return rev
            if self._watch is not None:
                self._watch.request_progress()
            await asyncio.sleep(0.1)
        raise TimeoutError(f"ground truth did not reach etcd's revision {rev} (at {self.progress})")

    async def etcd_state(self, rev: int = 0) -> tuple[dict[str, tuple[int, str | None]], int]:
        """etcd's own state of the range (at `rev`, 0: now): name -> (mod_rev, opid), and the revision."""
        kvs, hdr, _, _ = await self.client.range(self.prefix.encode(), _end(self.prefix), revision=rev)
        return {self.name_of(kv.key.decode()): (kv.mod_revision, opid_of(kv.key.decode(), kv.value))
                for kv in kvs}, (rev or hdr)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        await self.client.close()

    # --- the model ---------------------------------------------------------------------------------

    def iter_states(self, revs):
        """(rev, state) for each revision in `revs`, ascending; the state is one dict updated in place
        (compare it before the next step; a long soak's lists need not each hold a copy)."""
        state = dict(self.initial)
        i = 0
        for r in sorted(set(revs)):
            while i < len(self.events) and self.events[i].rev <= r:
                e = self.events[i]
                if e.type == "DELETE":
                    state.pop(e.name, None)
                else:
                    state[e.name] = (e.rev, e.opid)
                i += 1
            yield r, state

    def states_at(self, revs) -> dict[int, dict[str, tuple[int, str | None]]]:
        """The range's state (name -> (mod_rev, opid)) at each revision in `revs`, by replaying the
        recorded events from the initial state (one sweep)."""
        return {r: dict(state) for r, state in self.iter_states(revs)}

    def events_between(self, lo: int, hi: int) -> list[TEvent]:
        """Recorded events with lo < rev <= hi."""
        return self.events[bisect.bisect_right(self.revs, lo):bisect.bisect_right(self.revs, hi)]

    def event_at(self, rev: int, name: str) -> TEvent | None:
        i = bisect.bisect_left(self.revs, rev)
        while i < len(self.revs) and self.revs[i] == rev:
            if self.events[i].name == name:
                return self.events[i]
            i += 1
        return None


def _end(prefix: str) -> bytes:
    from storage.etcd import prefix_end
    return prefix_end(prefix.encode())
