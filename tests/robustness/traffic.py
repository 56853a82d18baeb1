"""The traffic: concurrent clients over real HTTP (aiohttp), each recording every request it makes with its
start and end time, status, resourceVersion and the objects it saw.

Writers create cold ConfigMaps, update (GET, then PUT with the read resourceVersion) hot and cold ones and
delete cold ones; listers make consistent lists, resourceVersion=0 lists and paged lists followed to the
end; watchers list, then watch from that resourceVersion with bookmarks and short timeouts, reconnecting
from the last resourceVersion they saw, and start a new chain (list + watch) only after a 410.
Every written value carries a unique `data.op`, so the checkers can find it in etcd's history."""
from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import aiohttp

NAMESPACE = "robust"
HOT_KEYS = 3
# Two complementary shardSelectors (KEP-5866): sharded lists and watches use one of them, and a resident
# apiserver (--residency) keeps the first.
SHARDS = ("shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
          "shardRange(object.metadata.uid, '0x8000000000000000', '0xffffffffffffffff')")
PAD = 64 * 1024
MAX_COLD = 30    # cold objects per writer at most (a long soak's state stays bounded)


@dataclass(frozen=True)
class Kind:
    """The resource the traffic writes: a built-in kind or a custom resource (served once its CRD exists)."""
    plural: str
    api_version: str
    kind: str
    group_path: str        # /api/v1, /apis/<group>/<version>
    key_resource: str      # the etcd key segment: configmaps, <group>/<plural>

    @property
    def path(self) -> str:
        return f"{self.group_path}/namespaces/{NAMESPACE}/{self.plural}"

    @property
    def etcd_prefix(self) -> str:
        return f"/registry/{self.key_resource}/{NAMESPACE}/"

    def crd(self) -> dict | None:
        if "/" not in self.api_version:
            return None
        from tests.helpers import crd
        return crd(self.api_version.split("/")[0], self.plural, self.kind, status=False, short_names=False)


CONFIGMAPS = Kind("configmaps", "v1", "ConfigMap", "/api/v1", "configmaps")
WIDGETS = Kind("widgets", "robust.example.com/v1", "Widget", "/apis/robust.example.com/v1",
               "robust.example.com/widgets")
KINDS = {"configmaps": CONFIGMAPS, "widgets": WIDGETS}


@dataclass
class Op:
    client: str
    kind: str            # create update delete get list_consistent list_rv0 list_exact list_paged list_watchlist
    start: float
    end: float = 0.0
    status: int = 0      # HTTP status; 0: no answer (connection error or client timeout)
    rv: int | None = None
    name: str | None = None
    opid: str | None = None
    items: list | None = None    # lists: [(name, rv, opid)]
    error: str | None = None
    status_kind: bool = True     # a non-2xx answer was a Status object
    pages: list | None = None    # paged lists: the RV each page reported
    longest: float | None = None  # paged lists: the longest page request (s)
    read_rv: int | None = None   # updates: the RV the PUT was conditioned on
    shard: str | None = None     # lists: the shardSelector sent

    def brief(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if v is not None and k != "items"}
        if self.items is not None:
            d["items"] = len(self.items)
        return d


@dataclass
class WatchChain:
    """One watch the client keeps resuming: a list at `start_rv`, then watch sessions each from the
    last RV seen; ends at a 410 (`expired`) or when the traffic stops."""
    client: str
    id: int
    start_rv: int
    start: float
    events: list = field(default_factory=list)      # (t, type, name, rv, opid), BOOKMARKs included
    sessions: list = field(default_factory=list)    # (t0, t1, from_rv, outcome, timeoutSeconds)
    expired: tuple | None = None                    # (t, from_rv, message)
    shard: str | None = None                        # the shardSelector of every session
    from_zero: bool = False                         # one watch from resourceVersion=0 (the state, then events)

    def last_rv(self) -> int:
        return max([self.start_rv] + [e[3] for e in self.events[-1:]])


class History:
    def __init__(self):
        self.t0 = time.monotonic()
        self.ops: list[Op] = []
        self.chains: list[WatchChain] = []
        self.readyz: list[tuple[float, int]] = []
        self.livez: list[tuple[float, int]] = []
        self.marks: dict[str, float] = {}    # fault_start, fault_end, ...

    def now(self) -> float:
        return time.monotonic() - self.t0

    def mark(self, name: str) -> None:
        self.marks[name] = self.now()


def is_status(doc) -> bool:
    """A metav1.Status: with its kind, or (upstream's request-timeout 504, written from ErrStatus without its
    TypeMeta) a Failure with a code."""
    return isinstance(doc, dict) and (doc.get("kind") == "Status" or
                                      (doc.get("status") == "Failure" and isinstance(doc.get("code"), int)))


def _items(body: dict) -> list:
    out = []
    for it in body.get("items") or []:
        md = it.get("metadata") or {}
        out.append((md.get("name"), int(md.get("resourceVersion") or 0), (it.get("data") or {}).get("op")))
    return out


class Traffic:
    def __init__(self, base: str, history: History, *, seed: int, rate: float, request_timeout: float,
                 writers: int = 5, listers: int = 3, watchers: int = 4, write_bases: list[str] | None = None,
                 kind: Kind = CONFIGMAPS, watch_list: bool = True, pad: asyncio.Event | None = None):
        self.pad = pad    # while set, written objects carry PAD bytes of padding (the slow-watcher scenario)
        self.base = base
        self.watch_list_ok = watch_list   # watch-list is served by the watch cache only (422 without it)
        self.kind = kind
        self.write_bases = write_bases or [base]   # writer i writes through write_bases[i % n]
        self.h = history
        self.rng = random.Random(seed)
        self.rate = rate
        self.request_timeout = request_timeout
        self.n_writers, self.n_listers, self.n_watchers = writers, listers, watchers
        self.stopping = asyncio.Event()
        self.path = kind.path
        self.hot = [f"hot-{i}" for i in range(HOT_KEYS)]
        self._chain_ids = 0

    @property
    def clients(self) -> int:
        return self.n_writers + self.n_listers + self.n_watchers

    # --- plumbing ----------------------------------------------------------------------------------

    def session(self, watch: bool = False, base: str | None = None) -> aiohttp.ClientSession:
        t = (aiohttp.ClientTimeout(total=None, sock_connect=5) if watch
             else aiohttp.ClientTimeout(total=self.request_timeout + 10))
        return aiohttp.ClientSession(base or self.base, timeout=t)

    async def call(self, s: aiohttp.ClientSession, op: Op, method: str, path: str, *, params=None,
                   body=None) -> dict | None:
        """One request into `op`: status, and the decoded body of a 2xx (None otherwise)."""
        try:
            async with s.request(method, path, params=params, json=body) as r:
                raw = await r.read()
                op.status = r.status
                try:
                    doc = json.loads(raw) if raw else None
                except ValueError:
                    doc = None
                if r.status >= 300:
                    op.status_kind = is_status(doc)
                    op.error = (doc.get("message") if isinstance(doc, dict)
                                else raw[:200].decode("utf-8", "replace"))
                    if r.status == 429:
                        op.error = f"{op.error} (Retry-After {r.headers.get('Retry-After')})"
                    return None
                return doc
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            op.status = 0
            op.error = f"{type(e).__name__}: {e}"
            return None
        finally:
            op.end = self.h.now()
            self.h.ops.append(op)

    async def pace(self, started: float, clients: int) -> None:
        period = clients / self.rate
        left = period - (self.h.now() - started)
        if left > 0:
            try:
                await asyncio.wait_for(self.stopping.wait(), left * (0.5 + self.rng.random()))
            except asyncio.TimeoutError:
                pass

    async def backoff(self, op: Op) -> None:
        if op.status in (0, 429) or op.status >= 500:
            await asyncio.sleep(0.2 + 0.3 * self.rng.random())

    # --- setup ---------------------------------------------------------------------------------------

    async def setup(self) -> None:
        """The hot keys, created through the API (so they are in the recorded history)."""
        async with self.session() as s:
            for name in self.hot:
                op = Op("setup", "create", self.h.now(), name=name, opid=f"setup-{name}")
                doc = await self.call(s, op, "POST", self.path, body=self.obj(name, op.opid))
                if doc is None:
                    raise RuntimeError(f"setup create {name}: {op.status} {op.error}")
                op.rv = int(doc["metadata"]["resourceVersion"])

    def obj(self, name: str, opid: str, rv: str | None = None) -> dict:
        md = {"name": name, "namespace": NAMESPACE}
        if rv is not None:
            md["resourceVersion"] = rv
        data = {"op": opid}
        if self.pad is not None and self.pad.is_set():
            data["pad"] = "x" * PAD
        return {"apiVersion": self.kind.api_version, "kind": self.kind.kind, "metadata": md, "data": data}

    # --- clients --------------------------------------------------------------------------------------

    async def run(self) -> None:
        tasks = [asyncio.create_task(self.writer(f"w{i}", random.Random(self.rng.random()),
                                                 self.write_bases[i % len(self.write_bases)]))
                 for i in range(self.n_writers)]
        tasks += [asyncio.create_task(self.lister(f"l{i}", random.Random(self.rng.random())))
                  for i in range(self.n_listers)]
        tasks += [asyncio.create_task(self.watcher(f"x{i}", random.Random(self.rng.random())))
                  for i in range(self.n_watchers)]
        await self.stopping.wait()
        done, pending = await asyncio.wait(tasks, timeout=self.request_timeout + 20)
        for t in pending:
            t.cancel()
        for t in tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass

    async def writer(self, cid: str, rng: random.Random, base: str) -> None:
        mine: list[str] = []
        seq = 0
        active = self.n_writers + self.n_listers
        async with self.session(base=base) as s:
            while not self.stopping.is_set():
                t = self.h.now()
                seq += 1
                opid = f"{cid}-{seq}"
                r = rng.random()
                if len(mine) >= MAX_COLD and r < 0.75:
                    r = 0.8                  # enough cold objects of this writer: delete one instead
                if r < 0.3 or (r >= 0.75 and not mine):
                    name = f"c{cid}-{seq}"
                    op = Op(cid, "create", t, name=name, opid=opid)
                    doc = await self.call(s, op, "POST", self.path, body=self.obj(name, opid))
                    if doc is not None:
                        op.rv = int(doc["metadata"]["resourceVersion"])
                    if doc is not None or op.status == 0 or op.status >= 500:
                        mine.append(name)   # an indeterminate create may exist
                elif r < 0.75:
                    name = rng.choice(self.hot) if (rng.random() < 0.5 or not mine) else rng.choice(mine)
                    g = Op(cid, "get", t, name=name)
                    cur = await self.call(s, g, "GET", f"{self.path}/{name}")
                    if cur is None:
                        await self.backoff(g)
                        continue
                    g.rv = int(cur["metadata"]["resourceVersion"])
                    g.opid = (cur.get("data") or {}).get("op")
                    op = Op(cid, "update", self.h.now(), name=name, opid=opid, read_rv=g.rv)
                    doc = await self.call(s, op, "PUT", f"{self.path}/{name}",
                                          body=self.obj(name, opid, cur["metadata"]["resourceVersion"]))
                    if doc is not None:
                        op.rv = int(doc["metadata"]["resourceVersion"])
                else:
                    name = mine.pop(rng.randrange(len(mine)))
                    op = Op(cid, "delete", t, name=name)
                    doc = await self.call(s, op, "DELETE", f"{self.path}/{name}")
                    if doc is not None:
                        op.rv = int((doc.get("metadata") or {}).get("resourceVersion") or 0)
                        op.opid = (doc.get("data") or {}).get("op")
                    elif op.status == 0 or op.status >= 500:
                        mine.append(name)
                await self.backoff(op)
                await self.pace(t, active)

    async def lister(self, cid: str, rng: random.Random) -> None:
        active = self.n_writers + self.n_listers
        seen_rvs: list[int] = []
        async with self.session() as s:
            while not self.stopping.is_set():
                t = self.h.now()
                r = rng.random()
                shard = rng.choice(SHARDS) if rng.random() < 0.35 else None   # a sharded list now and then
                sp = {"shardSelector": shard} if shard else {}
                if r < 0.3 or (r < 0.7 and not seen_rvs):
                    op = Op(cid, "list_consistent", t, shard=shard)
                    doc = await self.call(s, op, "GET", self.path, params=sp)
                elif r < 0.5:
                    op = Op(cid, "list_rv0", t, shard=shard)
                    doc = await self.call(s, op, "GET", self.path, params={"resourceVersion": "0", **sp})
                elif r < 0.7:
                    # Exact at an RV this client saw earlier (a snapshot of the cache, or etcd at that revision)
                    op = Op(cid, "list_exact", t, read_rv=rng.choice(seen_rvs[-20:]), shard=shard)
                    doc = await self.call(s, op, "GET", self.path, params={
                        "resourceVersion": str(op.read_rv), "resourceVersionMatch": "Exact", **sp})
                else:
                    # a slow reader now and then: pages apart in time, so compaction can pass them
                    pause = rng.uniform(0.2, 0.8) if rng.random() < 0.3 else 0.0
                    op = await self.paged(s, cid, rng.randint(3, 8), pause, shard)
                    doc = None
                if doc is not None:
                    op.rv = int(doc["metadata"]["resourceVersion"])
                    op.items = _items(doc)
                if op.rv:
                    seen_rvs.append(op.rv)
                await self.backoff(op)
                await self.pace(t, active)

    async def paged(self, s: aiohttp.ClientSession, cid: str, limit: int, pause: float,
                    shard: str | None = None) -> Op:
        """A consistent paged list followed to the end, `pause` s between pages; one Op for the whole (its
        status is the last page's); `pages` holds every page's RV. A sharded one sends its selector with
        every page (continue tokens carry no shard, S7.14)."""
        op = Op(cid, "list_paged", self.h.now(), items=[], pages=[], shard=shard)
        sp = {"shardSelector": shard} if shard else {}
        params = {"limit": str(limit), **sp}
        while True:
            page = Op(cid, "page", self.h.now())
            doc = await self.call(s, page, "GET", self.path, params=params)
            self.h.ops.pop()   # pages live inside their list
            op.longest = max(op.longest or 0.0, page.end - page.start)
            op.status, op.error, op.status_kind = page.status, page.error, page.status_kind
            if doc is None:
                op.items = None
                break
            op.pages.append(int(doc["metadata"]["resourceVersion"]))
            op.items += _items(doc)
            cont = doc["metadata"].get("continue")
            if not cont:
                op.rv = op.pages[0]
                break
            params = {"limit": str(limit), "continue": cont, **sp}
            if pause:
                await asyncio.sleep(pause)
        op.end = self.h.now()
        self.h.ops.append(op)
        return op

    async def watcher(self, cid: str, rng: random.Random) -> None:
        async with self.session() as s, self.session(watch=True) as ws:
            while not self.stopping.is_set():
                # A new chain, sharded half the time: a consistent list then watches from its RV, or a
                # watch-list (its initial events end at a bookmark; from RV unset, consistent, or from RV 0)
                # then watches from the last RV seen.
                shard = rng.choice(SHARDS) if rng.random() < 0.5 else None
                if rng.random() < 0.2:
                    # a watch from resourceVersion=0: the current state as ADDED events, then the changes; one
                    # session (resuming from an initial event's RV would not be a resume)
                    self._chain_ids += 1
                    chain = WatchChain(cid, self._chain_ids, 0, self.h.now(), shard=shard, from_zero=True)
                    self.h.chains.append(chain)
                    await self.watch_session(ws, chain, rng.randint(1, 4))
                    continue
                if self.watch_list_ok and rng.random() < 0.5:
                    chain = await self.watch_list(ws, cid, rng.randint(2, 5), shard,
                                                  from_zero=rng.random() < 0.3)
                    if chain is None:
                        await asyncio.sleep(0.3)
                        continue
                else:
                    op = Op(cid, "list_consistent", self.h.now(), shard=shard)
                    doc = await self.call(s, op, "GET", self.path, params={"shardSelector": shard} if shard else None)
                    if doc is None:
                        await asyncio.sleep(0.3)
                        continue
                    op.rv = int(doc["metadata"]["resourceVersion"])
                    op.items = _items(doc)
                    self._chain_ids += 1
                    chain = WatchChain(cid, self._chain_ids, op.rv, self.h.now(), shard=shard)
                    self.h.chains.append(chain)
                while not self.stopping.is_set() and chain.expired is None:
                    await self.watch_session(ws, chain, rng.randint(1, 4))
                    if rng.random() < 0.35:  # a client that starts over (a new list or watch-list)
                        break
                    if rng.random() < 0.5:   # a client that takes its time to come back
                        await asyncio.sleep(rng.uniform(0.5, 2.5))

    async def watch_list(self, ws: aiohttp.ClientSession, cid: str, timeout: int, shard: str | None = None,
                         from_zero: bool = False) -> WatchChain | None:
        """A consistent watch-list (sendInitialEvents, RV unset): its initial events are recorded as a
        `list_watchlist` Op at the initial-events-end bookmark's RV (checked as a consistent list), and the
        rest of the stream as the first session of a new chain from that RV. None if the stream ended before
        the bookmark. `from_zero`: resourceVersion=0 (any state, `list_watchlist_rv0`, not checked for freshness)."""
        op = Op(cid, "list_watchlist_rv0" if from_zero else "list_watchlist", self.h.now(), items=[], shard=shard)
        params = {"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
                  "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": str(timeout)}
        if from_zero:
            params["resourceVersion"] = "0"
        if shard:
            params["shardSelector"] = shard
        chain = None
        try:
            async with ws.get(self.path, params=params,
                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=timeout + 20)) as r:
                op.status = r.status
                if r.status != 200:
                    raw = await r.read()
                    try:
                        doc = json.loads(raw)
                    except ValueError:
                        doc = None
                    op.status_kind, op.error = is_status(doc), raw[:200].decode("utf-8", "replace")
                    return None
                while chain is None:
                    line = await r.content.readline()
                    if not line:
                        op.error = "ended before the initial-events-end bookmark"
                        return None
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    md = obj.get("metadata") or {}
                    if ev.get("type") == "ERROR":
                        op.status, op.error, op.status_kind = obj.get("code") or 0, obj.get("message"), True
                        return None
                    if ev.get("type") == "ADDED":
                        op.items.append((md.get("name"), int(md.get("resourceVersion") or 0),
                                         (obj.get("data") or {}).get("op")))
                    elif ev.get("type") == "BOOKMARK" and \
                            (md.get("annotations") or {}).get("k8s.io/initial-events-end") == "true":
                        op.rv = int(md["resourceVersion"])
                        op.end = self.h.now()
                        self._chain_ids += 1
                        chain = WatchChain(cid, self._chain_ids, op.rv, op.end, shard=shard)
                    else:
                        op.status, op.error = 0, f"unexpected {ev.get('type')} before the initial-events-end bookmark"
                        return None
                self.h.chains.append(chain)
                await self._read_events(r, chain, chain.start_rv, op.end, timeout)
                return chain
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as e:
            if chain is None:
                op.status, op.error = 0, f"{type(e).__name__}: {e}"
            else:
                chain.sessions.append((op.end, self.h.now(), chain.start_rv, f"{type(e).__name__}: {e}", timeout))
            return chain
        finally:
            if not op.end:
                op.end = self.h.now()
            if chain is None and op.status == 200 and not op.error:
                op.status, op.error = 0, "no initial-events-end bookmark"
            if chain is None:
                op.items = None   # no complete initial state (e.g. timeoutSeconds passed while etcd was away)
            self.h.ops.append(op)

    async def _read_events(self, r, chain: WatchChain, frm: int, t0: float, timeout: int) -> None:
        """The rest of a watch-list stream: one session of `chain`."""
        outcome = "ended"
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            while True:
                read = asyncio.ensure_future(r.content.readline())
                await asyncio.wait((read, stop), return_when=asyncio.FIRST_COMPLETED)
                if not read.done():
                    read.cancel()
                    outcome = "stopped"
                    return
                line = read.result()
                if not line:
                    return
                ev = json.loads(line)
                typ, obj = ev.get("type"), ev.get("object") or {}
                if typ == "ERROR":
                    outcome = f"error {obj.get('code')}: {obj.get('message')}"
                    if obj.get("code") == 410:
                        chain.expired = (self.h.now(), frm, obj.get("message"))
                    return
                md = obj.get("metadata") or {}
                chain.events.append((self.h.now(), typ, md.get("name"), int(md.get("resourceVersion") or 0),
                                     (obj.get("data") or {}).get("op")))
        finally:
            stop.cancel()
            chain.sessions.append((t0, self.h.now(), frm, outcome, timeout))

    async def watch_session(self, ws: aiohttp.ClientSession, chain: WatchChain, timeout: int) -> None:
        t0 = self.h.now()
        frm = chain.last_rv()
        params = {"watch": "1", "resourceVersion": str(frm), "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout)}
        if chain.shard:
            params["shardSelector"] = chain.shard
        outcome = "ended"
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            async with ws.get(self.path, params=params,
                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=5,
                                                            sock_read=timeout + 20)) as r:
                if r.status != 200:
                    raw = await r.read()
                    outcome = f"http {r.status}"
                    if r.status == 410:
                        chain.expired = (self.h.now(), frm, raw[:300].decode("utf-8", "replace"))
                    else:
                        await asyncio.sleep(0.3 if r.status != 429 else 1.0)
                    return
                while True:
                    read = asyncio.ensure_future(r.content.readline())
                    await asyncio.wait((read, stop), return_when=asyncio.FIRST_COMPLETED)
                    if not read.done():
                        read.cancel()
                        outcome = "stopped"
                        return
                    line = read.result()
                    if not line:
                        return
                    ev = json.loads(line)
                    typ, obj = ev.get("type"), ev.get("object") or {}
                    t = self.h.now()
                    if typ == "ERROR":
                        code = obj.get("code")
                        outcome = f"error {code}: {obj.get('message')}"
                        if code == 410:
                            chain.expired = (t, frm, obj.get("message"))
                        else:
                            await asyncio.sleep(0.3)
                        return
                    md = obj.get("metadata") or {}
                    rv = int(md.get("resourceVersion") or 0)
                    chain.events.append((t, typ, md.get("name"), rv, (obj.get("data") or {}).get("op")))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as e:
            outcome = f"{type(e).__name__}: {e}"
            await asyncio.sleep(0.3)
        finally:
            stop.cancel()
            chain.sessions.append((t0, self.h.now(), frm, outcome, timeout))

    async def probe_health(self) -> None:
        """GET /readyz and /livez every 0.25 s (status 0: no answer)."""
        async def one(s, path: str, into: list) -> None:
            t = self.h.now()
            try:
                async with s.get(path) as r:
                    await r.read()
                    st = r.status
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                st = 0
            into.append((t, st))
        async with aiohttp.ClientSession(self.base, timeout=aiohttp.ClientTimeout(total=3)) as s:
            while not self.stopping.is_set():
                await asyncio.gather(one(s, "/readyz", self.h.readyz), one(s, "/livez", self.h.livez))
                await asyncio.sleep(0.25)
