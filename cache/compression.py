"""Cold entries below their wire size: per-resource zstd dictionaries (not upstream: KEP-6264 lists watch-cache
memory as a non-goal).

An entry stays as wire bytes while it is hot: while an event of the last 75 s (the event window's span)
refers to it, so live watch events are always served from plain bytes. Once the window has moved past it (by
time, or by later events evicting its own), the resource's `Compressor` replaces its bytes, in place, with a
zstd frame of them (`Entry.compress`);
`Entry.data` decodes the frame again, so every reader (GET, list, watch-list, the snapshot writer) gets the
same bytes as before and cannot tell.

* Dictionaries. A resource trains its own dictionary from its entries once it holds `min_objects` of them
  (few objects would not repay the dictionary's memory), and a new one when new entries compress markedly
  worse than the training sample did (new fields, another operator's objects). Each compressed entry
  references the `Codec` that decodes it, so a dictionary lives exactly as long as an entry uses it; after a
  retraining the old dictionary's entries are re-encoded, and at most two dictionaries per resource serve the
  current entries (older versions the window keeps may hold a retired one until their events leave it).
* No cross-tenant leak. Secrets are compressed without a dictionary: a dictionary is made of its samples'
  bytes and would carry one namespace's secret values into every entry (and snapshot) that uses it.
  Dictionaries are never logged nor reported, only their sizes.
* Off the event loop. Training, compression and re-encoding run in a worker thread (libzstd releases the GIL);
  only the swap of an entry's bytes, after checking it is still the current version, runs on the loop.
* The frame. Magicless zstd frames without a dictionary id (the entry knows its codec), with the content size
  and zstd's content checksum: a damaged entry fails to decode (`CorruptEntry`), it is never served.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter
from typing import Any

import zstandard

import ext
from machinery.aio import wait_event

log = logging.getLogger("cache.compression")
_time, _rv = attrgetter("time"), attrgetter("rv")     # a CacheEvent's, for bisection of the history

# zstd level 9: frames 10-13 % smaller than level 3's on bench/corpus.py's objects (ConfigMap 223 -> 196 B,
# RoleBinding 108 -> 92 B, Pod 485 -> 445 B, 16 KiB dictionaries) for about 3x the compression CPU (tens of us
# per object, once per cold entry, in a worker thread); decoding costs the same. Levels 15-19 saved 1-4 % more
# for 10-40x the CPU.
LEVEL = 9
DICT_BYTES = 16 * 1024          # per dictionary (a trained one may be smaller); measured in bench.heap_per_object
TRAIN_SAMPLES = 2000            # entries sampled to train a dictionary
TRAIN_SAMPLE_BYTES = 4 << 20    # and at most this many of their bytes
DRIFT = 1.5                     # retrain when recent entries compress this much worse than the training sample
DRIFT_WINDOW = 512              # ... over at least this many entries
MIN_SAVING = 16                 # keep a frame only if it saves at least this many bytes over the wire form
# A (re)list is compressed while it is read, a batch at a time once this many wire bytes (or a pass's batch of
# entries) are waiting: the heap never holds more than about two batches of listed objects as wire bytes, so
# the memory of a big list is not first grown to its plain size and then left to glibc full of holes
# (bench.residency, realistic profile: a shard ingesting 287 MB plain and compressing afterwards kept 78 MiB of
# RSS beyond its heap and the empty-process floor).
LISTING_BATCH_BYTES = 8 << 20
# A faster level for those batches (`CompressionConfig.listing_level`; not the default): level 3 costs 3.5-6x
# less CPU than level 9 on bench/corpus.py's objects with their dictionary (a ConfigMap 3.9 against 23 us, a
# Pod 11 against 40 us; frames 5-17 % larger), and the passes re-encode those frames at LEVEL once the cache is
# ready. Measured on 575 MB of realistic objects, 2 cores (bench.warm_restart, bench.residency --profiles
# realistic): at level 9 a cold start is ready in 11.5 s against 6.5 s uncompressed and a K = 2 shard settles
# at 0.249x an uncompressed full replica's RSS; at level 3 it is ready in 7.9 s against 5.6 s, but the
# re-encoding leaves pymalloc's pools of the larger frames part-empty and the shard settles at 0.290x. Level 9
# stays the default for the memory it keeps.
LISTING_LEVEL = 3


def _frame_params(level: int) -> zstandard.ZstdCompressionParameters:
    """Parameters for small inputs (their tables and window fit a record, so a compression context stays small)."""
    return zstandard.ZstdCompressionParameters.from_level(
        level, source_size=16 * 1024, format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_checksum=1, write_dict_id=0,
        write_content_size=1)


_FRAME = {LEVEL: _frame_params(LEVEL), LISTING_LEVEL: _frame_params(LISTING_LEVEL)}   # the levels used


# A compressed entry that does not decode (its checksum or its frame is damaged) raises libzstd's error itself:
# `Entry.data` calls the decoder's C method directly, without a Python frame in between.
CorruptEntry = zstandard.ZstdError


@dataclass
class CompressionConfig:
    enabled: bool = True             # --cache-compression
    min_objects: int = 256           # a resource compresses once it holds this many entries
    interval: float = 2.0            # seconds between background passes
    batch: int = 4096                # entries per pass
    recheck: float = 15.0            # seconds between passes while only hot entries wait (time makes them cold)
    hot_events: int | None = None    # None: the whole event window is hot; N: only the newest N events' entries
    listing_level: int = LEVEL       # zstd level of the frames made while a list is read (see LISTING_LEVEL)
    # (the test flag --cache-compression-eager sets min_objects=2, interval=0.05, hot_events=0: every entry, hot
    # ones too, so the differential suites, which hold few objects, really serve compressed entries)


EAGER = dict(min_objects=2, interval=0.05, hot_events=0)

# The event loop's decoder of a dictionary is a libzstd context of 95 KiB (ZSTD_sizeof_DCtx: its literal buffer
# and entropy tables), per resource that compresses: 4 RBAC resources held 38 B per object of a 10,000-object
# RBAC cluster in decoders alone (bench.rbac_floor). It is made when an entry of the resource is first read, and
# dropped this long after (the next read makes another: about 12 us, once per this many seconds at most), so a
# resource nobody reads, as cold objects are, keeps no decoder.
DECODER_TTL = 30.0
# What libzstd keeps once a decoder was made from a dictionary: the digested dictionary (ZSTD_DDict, held by the
# dictionary object for later decoders), its entropy tables with the content referenced, not copied: 28 KB by
# RSS (200 dictionaries, glibc trimmed). python-zstandard does not report it; counted in `native_bytes` while
# it exists (dropping the loop's decoder drops it too: the dictionary object is made again from its bytes).
DDICT_BYTES = 29 * 1024


class Codec(ext.CodecBase):
    """A dictionary (or none) and the decoder of the frames made with it. Shared by the entries it encoded, which
    leave `key_prefix` (their resource's: every key of theirs starts with it) out of the key they keep."""

    __slots__ = ("id", "dict_bytes", "ratio", "level", "_dict", "_decoder", "_digested", "decompress",
                 "__weakref__")

    def __init__(self, id_: int, dictionary: bytes | None, ratio: float = 0.0, level: int = LEVEL,
                 key_prefix: str = ""):
        super().__init__(key_prefix)
        self.id = id_
        self.ratio = ratio       # frame bytes / wire bytes over its training sample (0: unknown)
        self.level = level       # what its frames are made at (decoding does not depend on it)
        self.dict_bytes = len(dictionary) if dictionary else 0
        self._dict = zstandard.ZstdCompressionDict(dictionary) if dictionary else None
        self._digested = False   # a decoder was made from the dictionary (libzstd keeps its digested form)
        # The event loop's decoder (contexts are never used by two threads at once), made on first use: then
        # `decompress`, the wire bytes of a frame (event loop thread only; CorruptEntry if damaged), is its C
        # method itself, until `drop_decoder` (DECODER_TTL later).
        self._decoder: zstandard.ZstdDecompressor | None = None
        self.decompress = self._revive

    def _revive(self, frame: bytes) -> bytes:
        """The first decode since the loop's decoder was dropped (or ever): make it, then decode through its C
        method until it is dropped again."""
        dec = self._decoder = self.decoder()
        self.decompress = dec.decompress
        try:
            asyncio.get_running_loop().call_later(DECODER_TTL, _drop_decoder, weakref.ref(self))
        except RuntimeError:
            pass   # no event loop (a benchmark or test decoding in-process): kept
        return dec.decompress(frame)

    @property
    def has_decoder(self) -> bool:
        """Whether the loop's decoder context exists (the resource was read within DECODER_TTL)."""
        return self._decoder is not None

    def drop_decoder(self) -> None:
        """Free the loop's decoder context and the digested dictionary it made; the next read makes both again.
        (A worker thread compressing with the old dictionary object meanwhile keeps it until it is done.)"""
        if self._decoder is not None:
            self._decoder = None
            self.decompress = self._revive
            if self._dict is not None:
                self._dict = zstandard.ZstdCompressionDict(self._dict.as_bytes())
                self._digested = False

    def dictionary(self) -> bytes | None:
        """The dictionary's bytes, for the snapshot file only (never logged nor reported)."""
        return self._dict.as_bytes() if self._dict is not None else None

    def decoder(self) -> zstandard.ZstdDecompressor:
        if self._dict is not None:
            self._digested = True
        return zstandard.ZstdDecompressor(dict_data=self._dict, format=zstandard.FORMAT_ZSTD1_MAGICLESS)

    def compressor(self) -> zstandard.ZstdCompressor:
        """A new compression context, for one worker call (it loads the dictionary, and is dropped after)."""
        params = _FRAME.get(self.level) or _frame_params(self.level)
        return zstandard.ZstdCompressor(dict_data=self._dict, compression_params=params)

    def native_bytes(self) -> int:
        """What stays allocated: the dictionary's bytes (kept to build compression contexts), its digested form
        once a decoder was made from it (DDICT_BYTES), and the loop's decoder context while there is one, as
        libzstd reports it (ZSTD_sizeof_DCtx: its buffers are reserved but mostly untouched for records this
        small)."""
        return (self.dict_bytes + (DDICT_BYTES if self._digested else 0)
                + (self._decoder.memory_size() if self._decoder is not None else 0))

    def __repr__(self) -> str:  # never the dictionary's bytes
        return f"Codec(id={self.id}, dict_bytes={self.dict_bytes})"


def _drop_decoder(ref: weakref.ref) -> None:
    """The decoder's timer (it must not keep a dictionary nobody uses alive until it fires)."""
    codec = ref()
    if codec is not None:
        codec.drop_decoder()


def train(samples: list[bytes], dict_bytes: int = DICT_BYTES) -> bytes:
    """A zstd dictionary from `samples` (worker thread). Too few or too uniform samples for the trainer: the
    samples' own bytes as a raw-content dictionary (what zstd would find to reference anyway)."""
    try:
        return zstandard.train_dictionary(dict_bytes, samples, level=LEVEL).as_bytes()
    except zstandard.ZstdError:
        return b"".join(samples)[-dict_bytes:]


def compress_all(codec: Codec, datas: list[bytes]) -> list[bytes | None]:
    """Frames of `datas` (worker thread); None where a frame would not save MIN_SAVING bytes."""
    c = codec.compressor()
    out: list[bytes | None] = []
    for d in datas:
        f = c.compress(d)
        # An exact-size copy: the frame comes in a buffer of zstd's bound (about the input's size), which
        # keeping would cost as much as the plain bytes (tracemalloc: 1,591 B allocated for a 308 B frame).
        out.append(memoryview(f).tobytes() if len(f) + MIN_SAVING <= len(d) else None)
    return out


def recompress_all(old: Codec, new: Codec, frames: list[bytes]) -> list[bytes | None]:
    """Old frames re-encoded with `new` (worker thread, with its own decoder); None where the entry is better
    left plain or did not decode (a read will find it damaged)."""
    c, d_old = new.compressor(), old.decoder()
    out: list[bytes | None] = []
    for f in frames:
        try:
            d = d_old.decompress(f)
        except zstandard.ZstdError:
            out.append(None)
            continue
        g = c.compress(d)
        out.append(memoryview(g).tobytes() if len(g) + MIN_SAVING <= len(d) else None)
    return out


class Compressor:
    """One resource's compression: which entries are cold, its dictionaries, the background passes.

    The WatchCache tells it of every entry that becomes current (`note`) and of every reset (`reset`); the
    Cacher runs `run` beside its watch."""

    def __init__(self, wc, config: CompressionConfig, dictionary: bool = True, active=None):
        self.wc = wc
        self.active = active                  # passes wait while this says False (the Cacher: until ready)
        self.config = config
        self.dictionary = dictionary          # False for Secrets: no dictionary shared across namespaces
        # Entries not yet looked at, by RV (the entries themselves: a (rv, key) tuple per write cost 88 B more,
        # allocated at each write and freed 75 s later, holes in pymalloc's pools).
        self.pending: deque = deque()
        self.codec: Codec | None = None       # what new frames are made with
        self.retiring: Codec | None = None    # the previous dictionary while its entries are re-encoded
        self._next_id = 1
        self.retrain = False
        self._recent_in = self._recent_out = self._recent_n = 0
        self.trainings = 0
        self.reencoded = 0
        self.corrupt = 0
        self.compressed = 0                   # current entries held compressed, and their frames' bytes
        self.compressed_bytes = 0
        self.on_change = None                 # called after a pass changed something (the Cacher's gauges)
        self.freed = 0                        # wire bytes given up since the Cacher last returned memory to the OS
        self.history_compressed = 0           # older versions kept by the window, compressed
        self._history_done = 0                # the RV of the last event whose older versions were looked at
        self._in_flight = False               # a batch is being compressed in the worker thread
        self._seed = False                    # pending was dropped below min_objects: rebuild it after training
        self._wake: asyncio.Event | None = None   # set by note(): an idle resource costs no pass
        self.listed_bytes = 0                 # wire bytes of the listed entries waiting in `pending` (a (re)list)
        self._listing: tuple | None = None    # the listed batch in the worker thread: (future, entries, codec)

    # --- told by the WatchCache ----------------------------------------------------------------

    def note(self, e) -> None:
        self.pending.append(e)
        w = self._wake
        if w is not None and not w.is_set():
            w.set()

    def reset(self) -> None:
        """A relist: every entry is new (the listed ones are noted again, in listing order, not by RV)."""
        self.pending.clear()
        self.compressed = self.compressed_bytes = 0
        self.listed_bytes = 0
        if self._listing is not None:   # a batch of an abandoned list, still in the worker thread: dropped
            self._listing = None
            self._in_flight = False

    def kept(self, frame_bytes: int, count: int = 1) -> None:
        """Compressed entries became current (a warm start restored `count` of them, `frame_bytes` in all)."""
        self.compressed += count
        self.compressed_bytes += frame_bytes

    def dropped(self, e) -> None:
        """A compressed entry stopped being current (replaced or deleted)."""
        self.compressed -= 1
        self.compressed_bytes -= e.stored_size

    # --- the passes ----------------------------------------------------------------------------

    def _hot_floor(self) -> int:
        """Entries at or above this RV are hot: an event of the window refers to them, the window being the
        events of the last `wc.window` seconds (75 s; older events the capacity still keeps only serve watches
        resuming from far back, which decode) or, eager, the newest N events."""
        h = self.wc.history
        n = self.config.hot_events
        if n is None:
            # The first fresh event, by bisection (events are in time order): walked from the oldest, the
            # stale prefix (25,000-27,000 events behind a node tier at 10,000-31,000 nodes) three times a
            # pass was 2-4 % of the apiserver's samples (py-spy over bench.nodes, 330-1,000 Lease writes/s).
            i = bisect_left(h, self.wc.clock() - self.wc.window, key=_time)
            return h[i].rv if i < len(h) else self.wc.rv + 1
        if n == 0 or not h:
            return self.wc.rv + 1
        return h[-min(n, len(h))].rv

    def _cold_candidates(self) -> list:
        """Current, plain entries the window has moved past (at most a batch), from `pending`."""
        floor = self._hot_floor()
        out = []
        get = self.wc.store.get
        pending = self.pending
        while pending and len(out) < self.config.batch:
            e = pending[0]
            if e.rv >= floor and self.wc.list_rv < e.rv:
                break  # pending is in RV order after the listed entries: the rest is hot too
            pending.popleft()
            if e.codec is None and get(e.key) is e:
                out.append(e)
        return out

    async def run(self) -> None:
        """Background passes until cancelled (the Cacher cancels it with its other tasks)."""
        loop = asyncio.get_running_loop()
        self._wake = wake = asyncio.Event()
        wake.set()
        while True:
            # Woken by a new entry; while entries (or a deleted object's versions) wait to leave the window,
            # also when time may have moved them out of it (no write needs to come).
            waiting = self.pending or (self.wc.history and self.wc.history[-1].rv > self._history_done)
            await wait_event(wake, self.config.recheck if waiting else None)
            await asyncio.sleep(self.config.interval)
            wake.clear()
            try:
                if await self.step(loop) or self.retiring is not None or self._backlog() or \
                        (self.active is not None and not self.active()):
                    wake.set()   # more to do (or not ready yet): the next pass follows after the interval
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("compression pass failed resource=%s", self.wc.prefix)

    async def step(self, loop=None) -> int:
        """One pass: train if due, then compress the cold entries of one batch (current ones first, then older
        versions the window keeps). Returns the entries compressed."""
        loop = loop or asyncio.get_running_loop()
        if self.active is not None and not self.active():
            return 0   # listing or loading a snapshot: the state is partial, and the loop has better things to do
        if self.codec is None or self.retrain:
            if len(self.wc.store) < self.config.min_objects:
                if self.codec is None:   # nothing is compressed yet: remember no entry, look at all of them later
                    self.pending.clear()
                    self._seed = True
                return 0
            await self._train(loop)
        if self._seed:
            self._seed = False
            self.pending = deque(sorted((e for e in self.wc.slots if e is not None and e.codec is None),
                                        key=attrgetter("rv")))
        if self.retiring is not None:
            await self._reencode(loop)
        batch = self._cold_candidates()
        current = len(batch)
        batch += self._cold_history(self.config.batch - current)
        if not batch:
            return 0
        codec = self.codec
        self._in_flight = True   # taken from pending but not swapped yet: not settled
        try:
            frames = await loop.run_in_executor(None, compress_all, codec, [e.stored for e in batch])
        finally:
            self._in_flight = False
        n = self._install(batch, frames, codec, current)
        if n and self.on_change is not None:
            self.on_change()
        return n

    async def listed(self, final: bool, loop=None) -> None:
        """A page of a (re)list was added (`WatchCache.add_listed`); `final`: the list is complete.

        Listed entries are cold (no event of the window refers to them), so they are compressed while the list
        is read rather than once the cache is ready: each batch is compressed in the worker thread while the
        event loop reads and decodes the next page, and swapped in before the next batch starts. The state is
        partial and nobody reads it meanwhile (the Cacher is not ready). The first batch trains the dictionary.
        What is left (fewer than `min_objects` entries) waits for the passes, as before."""
        loop = loop or asyncio.get_running_loop()
        if self._listing is not None:
            fut, batch, codec = self._listing
            self._listing = None
            frames = await fut
            self._in_flight = False
            self._install(batch, frames, codec, len(batch))
        if not final and self.listed_bytes < LISTING_BATCH_BYTES and len(self.pending) < self.config.batch:
            return
        if self.codec is None or self.retrain:
            if len(self.wc.store) < self.config.min_objects:
                return
            await self._train(loop)
        get = self.wc.store.get
        batch = []
        while self.pending:
            e = self.pending.popleft()
            if e.codec is None and get(e.key) is e:
                batch.append(e)
        self.listed_bytes = 0
        if not batch:
            return
        codec = self._listing_codec()
        self._in_flight = True
        fut = loop.run_in_executor(None, compress_all, codec, [e.stored for e in batch])
        if final:
            frames = await fut
            self._in_flight = False
            if self._install(batch, frames, codec, len(batch)) and self.on_change is not None:
                self.on_change()
        else:
            self._listing = (fut, batch, codec)

    def _listing_codec(self) -> Codec:
        """What a list's frames are made with: the current codec, or with a faster `listing_level` the current
        dictionary at that level, installed as the retiring codec so that the passes re-encode its frames at
        LEVEL once the cache is ready (if a retired dictionary's entries are still being re-encoded, a relist
        right after a retraining, the current codec)."""
        level = self.config.listing_level
        if level == self.codec.level:
            return self.codec
        r = self.retiring
        if r is not None:
            return r if r.level == level else self.codec
        fast = Codec(self._next_id, self.codec.dictionary(), self.codec.ratio, level=level, key_prefix=self.wc.prefix)
        self._next_id += 1
        self.retiring = fast
        return fast

    def _install(self, batch: list, frames: list, codec: Codec, current: int) -> int:
        """Swap the frames of a compressed batch in (event loop): `batch[:current]` are current entries (skipped
        if written or relisted meanwhile), the rest older versions the window keeps. Returns the entries
        compressed."""
        if codec is not self.codec and codec is not self.retiring:
            return 0   # retired while this batch was compressed: its frames would keep a dropped dictionary
        get = self.wc.store.get
        done = n_in = n_out = older = 0
        for i, (e, f) in enumerate(zip(batch, frames)):
            if f is None or e.codec is not None:
                continue   # not worth it
            size = e.stored_size
            if i >= current:   # an older version the window keeps: nobody else changes it
                e.compress(f, codec)
                self.history_compressed += 1
                self.freed += size - len(f)
                older += 1
                continue
            if get(e.key) is not e:
                continue   # written (or relisted) meanwhile: the new version is hot
            e.compress(f, codec)
            done += 1
            n_in += size
            n_out += len(f)
        self.compressed += done
        self.compressed_bytes += n_out
        self.freed += n_in - n_out
        self._drifted(n_in, n_out, done)
        return done + older

    def _cold_history(self, room: int) -> list:
        """Older versions the window still keeps, plain, once their events are older than the window: the entry
        each event replaced and a deleted object's last state. They only serve watches resuming from far back
        (which decode); without this a bulk update would keep every previous version as wire bytes until its
        events are evicted. Each event is looked at once (`_history_done`: the RV of the last one)."""
        out: list = []
        if room <= 0:
            return out
        floor, h = self._hot_floor(), self.wc.history
        # (from the first event not looked at: islice skips the others in C, not one Python step each)
        for ev in islice(h, bisect_right(h, self._history_done, key=_rv), None):
            if ev.rv >= floor:
                break
            if len(out) >= room:
                break
            for e in (ev.prev, ev.entry if ev.type == "DELETED" else None):
                if e is not None and e.codec is None:
                    out.append(e)
            self._history_done = ev.rv
        return out

    def _backlog(self) -> bool:
        """Entries that are cold already but not looked at: pending ones (a full batch was taken, or the window
        has moved), or older versions of events the window has moved past."""
        floor = self._hot_floor()
        if self.pending and (self.pending[0].rv <= self.wc.list_rv or self.pending[0].rv < floor):
            return True
        h = self.wc.history
        i = bisect_right(h, self._history_done, key=_rv)     # the first event not looked at
        return i < len(h) and h[i].rv < floor

    async def _train(self, loop) -> None:
        codec_id = self._next_id
        self._next_id += 1
        if not self.dictionary:
            self.codec = Codec(codec_id, None, key_prefix=self.wc.prefix)
            return
        samples = self._samples()
        t0 = time.perf_counter()
        dictionary = await loop.run_in_executor(None, train, samples)
        codec = Codec(codec_id, dictionary, key_prefix=self.wc.prefix)
        frames = await loop.run_in_executor(None, compress_all, codec, samples)
        codec.ratio = sum(len(f) if f else len(s) for f, s in zip(frames, samples)) / max(
            1, sum(len(s) for s in samples))
        self.trainings += 1
        log.info("compression dictionary trained resource=%s samples=%d dict_bytes=%d ratio=%.3f seconds=%.3f",
                 self.wc.prefix, len(samples), len(dictionary), codec.ratio, time.perf_counter() - t0)
        if self.codec is not None:
            self.retiring = self.codec
        self.codec = codec
        self.retrain = False

    @property
    def trained_ratio(self) -> float:
        """The current dictionary's ratio over its training sample (0 before one exists)."""
        return self.codec.ratio if self.codec is not None else 0.0

    def restored(self, codecs: dict[int, Codec]) -> None:
        """A warm start installed entries compressed with these codecs: the newest makes new frames, an older
        one is re-encoded away as after a retraining."""
        if not codecs:
            return
        ids = sorted(codecs)
        self.codec = codecs[ids[-1]]
        self.retiring = codecs[ids[-2]] if len(ids) > 1 else None
        self._next_id = max(self._next_id, ids[-1] + 1)

    def _samples(self) -> list[bytes]:
        """Up to TRAIN_SAMPLES entries' wire bytes, drawn at random over the resource."""
        slots = [e for e in self.wc.slots if e is not None]
        if len(slots) > TRAIN_SAMPLES:
            slots = random.sample(slots, TRAIN_SAMPLES)
        out, size = [], 0
        for e in slots:
            d = e.data
            if size + len(d) > TRAIN_SAMPLE_BYTES and out:
                break
            out.append(d)
            size += len(d)
        return out

    def _drifted(self, n_in: int, n_out: int, n: int) -> None:
        """Retrain once recent entries compress DRIFT times worse than the training sample did."""
        if not self.dictionary or self.retiring is not None or not n:
            return
        self._recent_in += n_in
        self._recent_out += n_out
        self._recent_n += n
        if self._recent_n < DRIFT_WINDOW:
            return
        ratio = self._recent_out / max(1, self._recent_in)
        self._recent_in = self._recent_out = self._recent_n = 0
        if ratio > self.trained_ratio * DRIFT:
            log.info("compression ratio drifted resource=%s trained=%.3f recent=%.3f: retraining",
                     self.wc.prefix, self.trained_ratio, ratio)
            self.retrain = True   # the next pass trains a new dictionary and retires this one

    async def _reencode(self, loop) -> None:
        """Re-encode a batch of the retiring dictionary's entries; drop it when none is left."""
        old, new = self.retiring, self.codec
        batch = [e for e in self.wc.slots if e is not None and e.codec is old][: self.config.batch]
        if not batch:
            self.retiring = None
            return
        frames = await loop.run_in_executor(None, recompress_all, old, new, [e.stored for e in batch])
        get = self.wc.store.get
        for e, f in zip(batch, frames):
            if get(e.key) is not e or e.codec is not old:
                continue
            before = e.stored_size
            if f is None:
                try:
                    e.compress(old.decompress(e.stored), None)   # back to plain bytes: no entry keeps `old`
                except CorruptEntry:
                    continue   # left as it is: the next read reports it and the cache re-initialises
                self.compressed -= 1
                self.compressed_bytes -= before
            else:
                e.compress(f, new)
                self.compressed_bytes += len(f) - before
            self.reencoded += 1
        if self.on_change is not None:
            self.on_change()

    # --- reporting -------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Entries plain and compressed, their bytes, the dictionaries (sizes only) and the ratio."""
        plain = compressed = plain_bytes = frame_bytes = 0
        codecs: dict[int, Codec] = {}
        for e in self.wc.slots:
            if e is None:
                continue
            if e.codec is None:
                plain += 1
                plain_bytes += e.stored_size
            else:
                compressed += 1
                frame_bytes += e.stored_size
                codecs[id(e.codec)] = e.codec
        for c in (self.codec, self.retiring):
            if c is not None:
                codecs[id(c)] = c
        return {"entries_plain": plain, "entries_compressed": compressed, "plain_bytes": plain_bytes,
                "compressed_bytes": frame_bytes, "dictionaries": sum(1 for c in codecs.values() if c.dict_bytes),
                "dictionary_bytes": sum(c.dict_bytes for c in codecs.values()),
                "codec_native_bytes": sum(c.native_bytes() for c in codecs.values()),
                "decoders": sum(1 for c in codecs.values() if c.has_decoder),
                "trainings": self.trainings, "reencoded": self.reencoded, "corrupt": self.corrupt,
                "history_compressed": self.history_compressed,
                "settled": self.settled(), "pending": len(self.pending)}

    def settled(self, quiet: bool = False) -> bool:
        """Every cold entry has been looked at (benchmarks wait for this before they measure); `quiet`: every
        entry, the hot ones too once time has made them cold (for benchmarks that stopped writing: under churn
        it is never true)."""
        if self.codec is None and not self.retrain:
            return len(self.wc.store) < self.config.min_objects
        return not self.retrain and self.retiring is None and not self._in_flight and not self._backlog() \
            and not (quiet and self.pending)
