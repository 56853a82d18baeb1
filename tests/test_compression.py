"""Compressed residency (issue 23, cache/compression.py), the structures on their own: cold entries become zstd
frames in place and every reader still gets the wire bytes; hot ones (the event window) stay plain; Secrets get
no dictionary; a drifted resource retrains and its old dictionary goes once no entry uses it; a damaged frame is
found when read; snapshots keep the compressed form. The HTTP side (byte-identical answers, the 500 and the
re-initialisation) is in tests/test_compression_http.py."""
from __future__ import annotations

import asyncio
import gc
import json
import os
import stat
import time
import weakref

import pytest

import ext
from cache import compression, snapshot
from cache.cache_watcher import CacheWatcher
from cache.compression import CompressionConfig, Compressor, CorruptEntry
from cache.watch_cache import WatchCache
from ext.entry_py import Entry as PyEntry

PREFIX = "/registry/configmaps/"


def cm(i: int, ns: str = "default", extra: str = "") -> bytes:
    """A ConfigMap as the cache keeps it (wire JSON without kind/apiVersion), varied per object."""
    return json.dumps({"metadata": {"name": f"settings-{i:05d}", "namespace": ns, "uid": f"6f1c{i:08x}-2b1e-4c7e",
                                    "resourceVersion": str(10 + i), "creationTimestamp": "2026-11-30T10:00:00Z",
                                    "labels": {"app": f"app-{i % 7}", "tier": "backend"}},
                       "data": {"log.level": ["info", "debug", "warn"][i % 3], "replicas": str(i % 5),
                                "endpoint": f"https://svc-{i % 11}.{ns}.svc:8443/v1{extra}"}},
                      separators=(",", ":")).encode()


def filled(n: int, config: CompressionConfig, prefix: str = PREFIX, dictionary: bool = True,
           data=cm, clock=time.monotonic) -> WatchCache:
    wc = WatchCache(prefix, clock)
    wc.compressor = Compressor(wc, config, dictionary=dictionary)
    wc.replace(((f"{prefix}default/c{i:05d}", 10 + i, data(i), f"uid-{i}", "default", {}) for i in range(n)), 10 + n)
    return wc


async def run_passes(wc: WatchCache, n: int = 10) -> int:
    done = 0
    for _ in range(n):
        done += await wc.compressor.step()
    return done


@pytest.fixture(params=["c", "py"])
def Entry(request):
    return ext.Entry if request.param == "c" else PyEntry


def test_entry_compress_in_place_keeps_data(Entry):
    """`data` is the wire bytes before and after; `stored` is the frame; the codec decodes it."""
    codec = compression.Codec(1, None)
    wire = cm(1) * 3
    e = Entry(PREFIX + "default/a", 5, wire, 0, 7)
    frame = compression.compress_all(codec, [wire])[0]
    assert frame is not None and len(frame) < len(wire)
    e.compress(frame, codec)
    assert e.data == wire and e.stored == frame and e.codec is codec
    assert e.__sizeof__() < len(wire) and "compressed" in repr(e)


async def test_cold_entries_compress_and_read_back_identical():
    wc = filled(600, CompressionConfig(min_objects=100))
    before = {k: e.data for k, e in wc.store.items()}
    assert await run_passes(wc) == 600
    st = wc.compressor.stats()
    assert st["entries_compressed"] == 600 and st["entries_plain"] == 0 and st["dictionaries"] == 1
    assert {k: e.data for k, e in wc.store.items()} == before
    # the frames are much smaller than the wire bytes: a trained dictionary on similar records
    assert st["compressed_bytes"] < 0.35 * sum(map(len, before.values())), st
    assert wc.compressor.compressed == 600 and wc.compressor.compressed_bytes == st["compressed_bytes"]
    assert "dictionary" not in json.dumps(wc.stats()).replace("dictionary_bytes", "").replace("dictionaries", "")


async def test_too_few_objects_are_not_compressed():
    wc = filled(50, CompressionConfig(min_objects=100))
    assert await run_passes(wc) == 0 and wc.compressor.codec is None


async def test_hot_entries_stay_plain_until_the_window_moves_past():
    """Entries an event in the window refers to are never compressed (watch events are served plain)."""
    now = [0.0]
    wc = filled(300, CompressionConfig(min_objects=100), clock=lambda: now[0])
    rv = wc.rv
    for i in range(5):
        rv += 1
        wc.apply_put(f"{PREFIX}default/c{i:05d}", rv, cm(i, extra="/new"), f"uid-{i}", "default", {}, {})
    await run_passes(wc)
    hot = [e for e in (ev.entry for ev in wc.history)]
    assert hot and all(e.codec is None for e in hot)
    assert wc.compressor.compressed == 295
    # the window moves past them (100 events, the oldest older than 75 s): they become cold and are compressed
    now[0] = 1000.0
    for j in range(150):
        rv += 1
        wc.apply_put(f"{PREFIX}other/x{j}", rv, cm(1000 + j), f"u{j}", "other", {}, None)
    await run_passes(wc)
    assert all(wc.store.get(f"{PREFIX}default/c{i:05d}").codec is not None for i in range(5))
    assert all(ev.entry.codec is None for ev in wc.history)


async def test_written_entries_turn_cold_with_time_alone():
    """A bulk load that no later write pushes out of the window: its entries are compressed once their events
    are older than the window's 75 s, though the window's capacity still keeps the events."""
    now = [0.0]
    wc = filled(0, CompressionConfig(min_objects=100), clock=lambda: now[0])
    for i in range(300):
        wc.apply_put(f"{PREFIX}default/c{i:05d}", 20 + i, cm(i), f"uid-{i}", "default", {}, None)
    assert await run_passes(wc) == 0 and len(wc.history) == 300
    now[0] = 60.0
    assert await run_passes(wc) == 0
    now[0] = 76.0
    assert await run_passes(wc) == 300 and len(wc.history) == 300
    assert wc.compressor.settled(quiet=True)


async def test_older_versions_the_window_keeps_turn_cold_too():
    """A bulk update: the window keeps every previous version (the `prev` of its events) and a deleted object's
    last state; once those events are older than 75 s they are compressed as well, and a list at an RV before
    the update (rebuilt from them) still reads the old bytes."""
    now = [0.0]
    wc = filled(300, CompressionConfig(min_objects=100), clock=lambda: now[0])
    before_rv = wc.rv
    old = {k: e.data for k, e in wc.store.items()}
    rv = wc.rv
    for i in range(300):
        rv += 1
        wc.apply_put(f"{PREFIX}default/c{i:05d}", rv, cm(i, extra="/v2"), f"uid-{i}", "default", {}, {})
    rv += 1
    wc.apply_delete(f"{PREFIX}default/c00007", rv, cm(7, extra="/v2"), "default", {})
    await run_passes(wc)
    assert wc.compressor.history_compressed == 0 and all(ev.prev.codec is None for ev in wc.history if ev.prev)
    now[0] = 80.0
    await run_passes(wc)
    assert wc.compressor.history_compressed == 302 and wc.compressor.settled(quiet=True)   # 300 + the delete's two
    assert all(ev.prev.codec is not None for ev in wc.history if ev.prev)
    assert wc.history[-1].entry.codec is not None          # the deleted object's last state
    tree = wc.snapshot_at(before_rv)
    assert tree is not None and {e.key: e.data for e in wc.iter_prefix(tree, PREFIX)} == old


async def test_the_window_moves_past_part_of_the_history_batch_by_batch():
    """Updates one a second: once the window (75 s) has moved past the first 40 of them, exactly those events'
    older versions are compressed, over passes of 16 that each resume after the last event looked at, and the
    fresh ones stay plain (the hot floor and the history's cursor are found by bisection)."""
    now = [0.0]
    wc = filled(300, CompressionConfig(min_objects=100, batch=16), clock=lambda: now[0])
    rv = wc.rv
    for i in range(100):
        now[0] = float(i)
        rv += 1
        wc.apply_put(f"{PREFIX}default/c{i:05d}", rv, cm(i, extra="/v2"), f"uid-{i}", "default", {}, {})
    now[0] = 75.0 + 39.5                              # events at t = 0..39 are older than the window, 40..99 not
    c, h = wc.compressor, wc.history
    assert c._hot_floor() == h[40].rv and c._backlog()
    partial = set()
    for _ in range(40):                               # the current entries first (listed, then updated), then
        await c.step()                                # the events' older versions, 16 entries a pass
        n = c.history_compressed
        assert c._history_done == (h[n - 1].rv if n else 0)
        if 0 < n < 40:
            partial.add(n)
    assert partial and c.history_compressed == 40 and not c._backlog()
    assert [ev.prev.codec is not None for ev in h] == [True] * 40 + [False] * 60
    now[0] = 75.0 + 99.5                              # the window has moved past every one of them
    assert c._hot_floor() == wc.rv + 1 and c._backlog()
    await run_passes(wc, 10)
    assert c.history_compressed == 100 and not c._backlog()


@pytest.mark.parametrize("level", [compression.LEVEL, compression.LISTING_LEVEL])
async def test_a_list_is_compressed_while_it_is_read(monkeypatch, level):
    """Listed entries are cold (no event refers to them): a (re)list is compressed a batch at a time while its
    pages are read, each batch in the worker while the next page is ingested, so at most about two batches are
    ever held as wire bytes (not the whole list, compressed only once the cache is ready). With a faster
    listing level, the passes re-encode those frames at LEVEL once ready."""
    monkeypatch.setattr(compression, "LISTING_BATCH_BYTES", 20_000)   # ~60 of these ConfigMaps
    wc = WatchCache(PREFIX, time.monotonic)
    wc.compressor = Compressor(wc, CompressionConfig(min_objects=100, listing_level=level))
    pages, per = 12, 100
    want = {f"{PREFIX}default/c{i:05d}": cm(i) for i in range(pages * per)}
    wc.begin_replace()
    plain = []
    for p in range(pages):
        wc.add_listed((f"{PREFIX}default/c{i:05d}", 10 + i, cm(i), f"uid-{i}", "default", {})
                      for i in range(p * per, (p + 1) * per))
        plain.append(sum(1 for e in wc.slots if e is not None and e.codec is None))
        await wc.compressor.listed(final=p == pages - 1)
    wc.finish_replace(10 + pages * per)
    assert max(plain) <= 2 * per, plain          # the batch in the worker and the page just read
    c = wc.compressor
    st = c.stats()
    assert st["entries_compressed"] == pages * per and st["entries_plain"] == 0 and st["trainings"] == 1
    assert c.compressed == pages * per and {k: e.data for k, e in wc.store.items()} == want
    if level == compression.LEVEL:
        assert c.retiring is None and all(e.codec is c.codec for e in wc.slots) and c.settled(quiet=True)
        assert await run_passes(wc) == 0             # nothing left for the passes
        return
    # made fast (level 3) with the trained dictionary, then re-encoded at level 9 by the passes once ready
    fast = c.retiring
    assert fast.level == compression.LISTING_LEVEL and c.codec.level == compression.LEVEL
    assert fast.dictionary() == c.codec.dictionary() and not c.settled(quiet=True)
    assert all(e.codec is fast for e in wc.slots)
    listed_bytes = st["compressed_bytes"]
    assert await run_passes(wc) == 0             # nothing left to compress, only to re-encode
    assert c.retiring is None and all(e.codec is c.codec for e in wc.slots) and c.settled(quiet=True)
    assert {k: e.data for k, e in wc.store.items()} == want
    assert c.stats()["compressed_bytes"] < listed_bytes and c.stats()["dictionaries"] == 1


async def test_a_list_too_small_to_train_on_is_left_to_the_passes():
    wc = WatchCache(PREFIX, time.monotonic)
    wc.compressor = Compressor(wc, CompressionConfig(min_objects=100))
    wc.begin_replace()
    wc.add_listed((f"{PREFIX}default/c{i:05d}", 10 + i, cm(i), f"uid-{i}", "default", {}) for i in range(50))
    await wc.compressor.listed(final=True)
    wc.finish_replace(100)
    assert wc.compressor.codec is None and len(wc.compressor.pending) == 50 and wc.compressor.compressed == 0


async def test_not_settled_while_a_batch_is_in_the_worker():
    """Benchmarks read memory once settled: a batch taken from pending but not yet swapped in is not settled
    (a 100 KB Pod run read the heap mid-pass: plain bytes, their copies and the frames all alive)."""
    wc = filled(300, CompressionConfig(min_objects=100))
    await wc.compressor.step()     # trains and compresses the listed entries
    rv = wc.rv
    for i in range(50):
        rv += 1
        wc.apply_put(f"{PREFIX}default/c{i:05d}", rv, cm(i, extra="/v2"), f"uid-{i}", "default", {}, {})
    wc.compressor.config.hot_events = 0
    seen = []
    orig = compression.compress_all

    def spy(codec, datas):
        seen.append(wc.compressor.settled())
        return orig(codec, datas)
    compression.compress_all = spy
    try:
        await wc.compressor.step()
    finally:
        compression.compress_all = orig
    assert seen == [False] and wc.compressor.settled(quiet=True)


async def test_replaced_and_deleted_entries_leave_the_counts():
    wc = filled(300, CompressionConfig(min_objects=100))
    await run_passes(wc)
    rv = wc.rv
    wc.apply_put(f"{PREFIX}default/c00001", rv + 1, cm(1, extra="/x"), "uid-1", "default", {}, {})
    wc.apply_delete(f"{PREFIX}default/c00002", rv + 2, cm(2), "default", {})
    st = wc.compressor.stats()
    assert wc.compressor.compressed == st["entries_compressed"] == 298
    assert wc.compressor.compressed_bytes == st["compressed_bytes"]


async def test_entry_written_during_a_pass_is_not_swapped():
    """The frame of a version that was replaced while the worker compressed it is dropped."""
    wc = filled(300, CompressionConfig(min_objects=100, hot_events=0))   # every entry is cold at once
    await wc.compressor.step()    # trains and compresses everything
    rv = wc.rv
    for i in range(200):          # new versions, plain until the next pass
        rv += 1
        wc.apply_put(f"{PREFIX}default/c{i:05d}", rv, cm(i, extra="/v2"), f"uid-{i}", "default", {}, {})
    loop = asyncio.get_running_loop()
    orig = compression.compress_all
    replaced = []
    key = f"{PREFIX}default/c00000"

    def put_newer() -> None:
        replaced.append(wc.apply_put(key, wc.rv + 1, cm(0, extra="/v3"), "uid-0", "default", {}, {}).entry)

    def racing(codec, datas):   # in the worker: a write lands on the loop before the frames come back
        out = orig(codec, datas)
        loop.call_soon_threadsafe(put_newer)
        return out
    compression.compress_all = racing
    try:
        assert wc.store.get(key).codec is None
        await wc.compressor.step()
    finally:
        compression.compress_all = orig
    assert replaced and replaced[0].codec is None and replaced[0].data == cm(0, extra="/v3")
    assert wc.store.get(f"{PREFIX}default/c00000") is replaced[0]
    assert wc.store.get(f"{PREFIX}default/c00001").codec is not None   # the others of the batch were swapped
    assert wc.compressor.compressed == wc.compressor.stats()["entries_compressed"]


async def test_a_decoder_is_made_when_read_and_dropped_after_its_ttl(monkeypatch):
    """The event loop's decoder context (95 KiB of libzstd's) exists only while its resource is read: a
    resource whose cold entries nobody reads keeps none; the first read makes one, which is dropped
    DECODER_TTL later (the next read makes another), with the digested dictionary libzstd made for it
    (counted while it exists)."""
    monkeypatch.setattr(compression, "DECODER_TTL", 0.2)
    wc = filled(300, CompressionConfig(min_objects=100))
    want = {k: e.data for k, e in wc.store.items()}
    await run_passes(wc)
    codec = wc.compressor.codec
    assert codec.dict_bytes > 0 and wc.compressor.stats()["entries_compressed"] == 300
    assert codec._decoder is None and codec.native_bytes() == codec.dict_bytes     # compressed, never read
    assert {k: e.data for k, e in wc.store.items()} == want                         # read: a decoder
    dec = codec._decoder
    assert dec is not None and codec.decompress == dec.decompress
    assert codec.native_bytes() == codec.dict_bytes + compression.DDICT_BYTES + dec.memory_size()
    assert wc.compressor.stats()["codec_native_bytes"] == codec.native_bytes()
    await asyncio.sleep(0.4)
    assert codec._decoder is None and codec.native_bytes() == codec.dict_bytes      # the digested one too
    assert {k: e.data for k, e in wc.store.items()} == want                         # read again: another
    assert codec._decoder is not None and codec._decoder is not dec
    assert codec.native_bytes() == codec.dict_bytes + compression.DDICT_BYTES + codec._decoder.memory_size()


async def test_secrets_get_no_dictionary():
    """A dictionary is made of its samples' bytes: Secrets are compressed without one (no cross-namespace leak)."""
    wc = filled(300, CompressionConfig(min_objects=100), prefix="/registry/secrets/", dictionary=False,
                data=lambda i: json.dumps({"metadata": {"name": f"s{i}", "namespace": f"tenant-{i % 9}"},
                                           "data": {"token": "QUJD" * 40}, "type": "Opaque"}).encode())
    await run_passes(wc)
    st = wc.compressor.stats()
    assert st["dictionaries"] == 0 and st["dictionary_bytes"] == 0
    assert wc.compressor.codec.dictionary() is None and st["entries_compressed"] == 300


async def test_drift_retrains_and_the_old_dictionary_goes():
    """New entries that compress much worse than the training sample: a new dictionary; the old one's entries
    are re-encoded and the old dictionary is freed once none uses it (at most two exist meanwhile)."""
    wc = filled(400, CompressionConfig(min_objects=100, hot_events=0))
    await run_passes(wc, 2)
    first = wc.compressor.codec
    ref = weakref.ref(first)
    rv = wc.rv

    def other(i: int) -> bytes:   # another operator's objects: nothing in common with the first dictionary
        return json.dumps({"spec": {"zq": [f"{(i * 7919 + k) % 104729:06x}-{k}" for k in range(12)],
                                    "w": {f"k{k}": k * i for k in range(6)}}, "kind2": "Widget"}).encode()
    for i in range(1200):
        rv += 1
        wc.apply_put(f"{PREFIX}w/x{i:05d}", rv, other(i), f"w{i}", "w", {}, None)
    want = {k: e.data for k, e in wc.store.items()}
    await run_passes(wc, 20)
    assert wc.compressor.trainings >= 2 and wc.compressor.codec is not first
    assert wc.compressor.retiring is None and wc.compressor.reencoded > 0
    assert all(e.codec is not first for e in wc.slots if e is not None)
    assert {k: e.data for k, e in wc.store.items()} == want
    del first
    wc.history.clear()
    wc.snapshot_trees.clear()
    gc.collect()
    assert ref() is None, "the first dictionary is still referenced"


async def test_damaged_frame_is_detected_when_read():
    wc = filled(300, CompressionConfig(min_objects=100))
    await run_passes(wc)
    e = wc.store.get(f"{PREFIX}default/c00007")
    f = bytearray(e.stored)
    f[len(f) // 2] ^= 0x40
    e.compress(bytes(f), e.codec)
    with pytest.raises(CorruptEntry):
        e.data


def test_watcher_frame_cache_holds_the_source_bytes():
    """A compressed entry's `data` is a new bytes object per read: the per-dispatch frame cache must not hand
    one watcher's frame of an old bytes object to another whose bytes got the same id()."""
    w = CacheWatcher.__new__(CacheWatcher)
    w.make_frame = lambda t, b: t.encode() + b":" + b
    cache: dict = {}
    first = w._encoded(("ADDED", b"x" * 40), cache)
    gc.collect()
    second = w._encoded(("ADDED", b"y" * 40), cache)
    assert first[1].endswith(b"x" * 40) and second[1].endswith(b"y" * 40)


async def test_snapshot_keeps_the_compressed_form(tmp_path):
    """Written as held (frames and their dictionary), restored without decompressing, owner-only file."""
    wc = filled(snapshot.CHUNK_ENTRIES + 300, CompressionConfig(min_objects=100, batch=100000))
    await run_passes(wc, 3)
    assert wc.compressor.compressed == len(wc)
    ident = {"resource": "configmaps", "group": "", "prefix": PREFIX, "residency": "", "head": b"x"}
    path = str(tmp_path / "s.snap")

    async def caps():
        yield "/configmaps", snapshot.capture(wc, ident)
    st = await snapshot.write_snapshot(path, {"etcd_prefix": "/registry"}, caps())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert st["bytes"] < sum(len(e.data) for e in wc.slots if e is not None)
    back = WatchCache(PREFIX, time.monotonic)
    back.compressor = Compressor(back, CompressionConfig(min_objects=100))
    await snapshot.load_section(snapshot.SnapshotFile.open(path).sections["/configmaps"], back, ident)
    assert [(k, e.rv, e.stored, e.slot) for k, e in back.store.items()] == \
        [(k, e.rv, e.stored, e.slot) for k, e in wc.store.items()]
    assert all(e.codec is back.compressor.codec for e in back.slots if e is not None)
    assert [e.data for e in back.slots if e] == [e.data for e in wc.slots if e]
    assert back.compressor.compressed == len(back) and back.compressor.trained_ratio == wc.compressor.trained_ratio


async def test_snapshot_writes_plain_what_its_section_has_no_codec_for(tmp_path):
    wc = filled(300, CompressionConfig(min_objects=100))
    await run_passes(wc)
    ident = {"resource": "configmaps", "group": "", "prefix": PREFIX, "residency": "", "head": b"x"}
    cap = snapshot.capture(wc, ident)
    cap.codecs = {}     # as if the section did not carry the dictionary: entries are written plain
    path = str(tmp_path / "s.snap")

    async def caps():
        yield "/configmaps", cap
    await snapshot.write_snapshot(path, {}, caps())
    back = WatchCache(PREFIX, time.monotonic)
    await snapshot.load_section(snapshot.SnapshotFile.open(path).sections["/configmaps"], back, ident)
    assert all(e.codec is None for e in back.slots if e) and \
        [e.data for e in back.slots if e] == [e.data for e in wc.slots if e]


# --- a state machine of the watch cache with compression, against a plain model ------------------------------

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule  # noqa: E402

KEYS = st.sampled_from([f"{PREFIX}ns{i % 3}/k{i:02d}" for i in range(24)])


class CompressedCacheMachine(RuleBasedStateMachine):
    """Ingest (puts, deletes, relists, paged relists compressed as they are read), idle spells (snapshots
    dropped), compression passes (training, drift retraining, re-encoding), warm
    restarts through a snapshot file, and reads (GET of the latest state, lists at random RVs in the window)
    against a model that keeps every state as plain dicts."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.now = [0.0]
        self.hot: int | None = None
        self.level = compression.LEVEL
        self.rv = 100
        self.state: dict[str, bytes] = {}
        self.states: dict[int, dict[str, bytes]] = {}   # rv -> the model's state after it
        self.tmp = None

    @initialize(hot=st.sampled_from([None, 0, 2]), keys=st.lists(KEYS, max_size=12),
                level=st.sampled_from([compression.LEVEL, compression.LISTING_LEVEL]))
    def start(self, hot, keys, level):
        """A cache listed with some objects; hot: the whole window is hot (None), nothing is (0), or 2 events;
        level: what paged relists compress at."""
        self.hot = hot
        self.level = level
        self.wc = self._new_cache()
        self.state = {k: cm(i, extra=k[-3:]) for i, k in enumerate(keys)}
        self.relist()

    def _new_cache(self) -> WatchCache:
        wc = WatchCache(PREFIX, lambda: self.now[0], lower_capacity=8, upper_capacity=16)
        wc.compressor = Compressor(wc, CompressionConfig(min_objects=4, batch=7, hot_events=self.hot,
                                                         listing_level=self.level))
        return wc

    def teardown(self) -> None:
        self.loop.close()
        if self.tmp is not None:
            import shutil
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _record(self) -> None:
        self.states[self.rv] = dict(self.state)

    @rule(key=KEYS, n=st.integers(0, 40), style=st.sampled_from(["cm", "other"]))
    def put_one(self, key, n, style):
        self.put(key, n, style)

    def put(self, key, n, style):
        self.rv += 1
        self.now[0] += 3
        data = cm(n, extra=f"/{key[-3:]}") if style == "cm" else json.dumps({"w": [n] * (n % 7), "k": key}).encode()
        prev = self.wc.store.get(key)
        self.wc.apply_put(key, self.rv, data, f"uid-{key}", key.split("/")[-2], {}, {} if prev else None)
        self.state[key] = data
        self._record()

    @rule(keys=st.lists(KEYS, min_size=2, max_size=8), n=st.integers(0, 40))
    def put_many(self, keys, n):
        for i, k in enumerate(keys):
            self.put(k, n + i, "cm" if (n + i) % 4 else "other")

    @rule(key=KEYS)
    def delete(self, key):
        if key not in self.state:
            return
        self.rv += 1
        self.now[0] += 3
        self.wc.apply_delete(key, self.rv, self.state[key], key.split("/")[-2], {})
        del self.state[key]
        self._record()

    @rule(passes=st.integers(1, 4))
    def compress(self, passes):
        for _ in range(passes):
            self.loop.run_until_complete(self.wc.compressor.step(self.loop))

    @rule()
    def drift(self):
        """As if recent entries compressed much worse: the next pass trains anew and re-encodes."""
        if self.wc.compressor.codec is not None and self.wc.compressor.retiring is None:
            self.wc.compressor.retrain = True

    @rule()
    def relisted(self):
        self.relist()

    @rule(page=st.integers(1, 5))
    def relisted_in_pages(self, page):
        """A relist as the Cacher reads it: page by page, compressed while it is read (`Compressor.listed`)."""
        items, wc = sorted(self.state.items()), self.wc
        wc.begin_replace()
        for i in range(0, max(len(items), 1), page):
            wc.add_listed((k, self.rv, d, f"uid-{k}", k.split("/")[-2], {}) for k, d in items[i:i + page])
            self.loop.run_until_complete(wc.compressor.listed(final=i + page >= len(items), loop=self.loop))
        wc.finish_replace(self.rv)
        self.states = {self.rv: dict(self.state)}

    @rule()
    def idle(self):
        """No event for longer than the window: the per-event snapshots go, the states stay servable."""
        self.now[0] += 80
        self.wc.drop_idle_snapshots()

    def relist(self):
        self.wc.replace(((k, self.rv, d, f"uid-{k}", k.split("/")[-2], {}) for k, d in sorted(self.state.items())),
                        self.rv)
        self.states = {self.rv: dict(self.state)}

    @rule()
    def warm_restart(self):
        import tempfile
        self.tmp = self.tmp or tempfile.mkdtemp(prefix="zsm-")
        ident = {"resource": "configmaps", "group": "", "prefix": PREFIX, "residency": "", "head": b"x"}
        path = os.path.join(self.tmp, "s.snap")

        async def go():
            async def caps():
                yield "/configmaps", snapshot.capture(self.wc, ident)
            await snapshot.write_snapshot(path, {}, caps())
            back = self._new_cache()
            await snapshot.load_section(snapshot.SnapshotFile.open(path).sections["/configmaps"], back, ident)
            return back
        self.wc = self.loop.run_until_complete(go())
        self.states = {self.wc.rv: dict(self.state)}

    @rule(data=st.data())
    def list_at(self, data):
        lo = self.wc.oldest_servable_rv()
        rvs = [rv for rv in self.states if rv >= lo]
        if not rvs:
            return
        rv = data.draw(st.sampled_from(sorted(rvs)))
        tree = self.wc.snapshot_at(rv)
        if tree is None:
            return
        got = {e.key: e.data for e in self.wc.iter_prefix(tree, PREFIX)}
        assert got == self.states[rv]

    @invariant()
    def latest_state_and_counts(self):
        assert {k: e.data for k, e in self.wc.store.items()} == self.state
        c = self.wc.compressor
        st_ = c.stats()
        assert c.compressed == st_["entries_compressed"] and c.compressed_bytes == st_["compressed_bytes"]
        live = {id(e.codec) for e in self.wc.slots if e is not None and e.codec is not None}
        assert live <= {id(x) for x in (c.codec, c.retiring) if x is not None}, "an entry keeps a dropped codec"
        horizon = self.now[0] - self.wc.window
        for ev in self.wc.history:   # entries of the window's fresh events stay plain unless eager
            if c.config.hot_events is None and ev.time >= horizon:
                assert ev.entry.codec is None


CompressedCacheMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestCompressedCacheMachine = CompressedCacheMachine.TestCase
