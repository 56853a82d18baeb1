"""Checkers over a whole recorded history against the ground truth (etcd's own watch).

Each returns a list of `Violation`s; `excerpt` is the smallest piece of history that shows it."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from tests.robustness.traffic import History, Op, WatchChain
from tests.robustness.truth import Recorder

WRITES = ("create", "update", "delete")
LISTS = ("list_consistent", "list_rv0", "list_exact", "list_paged", "list_watchlist", "list_watchlist_rv0")
CONSISTENT = ("list_consistent", "list_paged", "list_watchlist")   # no older than what was acknowledged
# Non-2xx answers a client may see: normal ones (404, 409), compaction (410), outages (429, 500, 504).
ALLOWED_ERRORS = {404, 409, 410, 429, 500, 504}
# A watch must end this soon after its timeoutSeconds (a loaded machine).
WATCH_MARGIN = 10.0


@dataclass
class Violation:
    checker: str        # writes, reads, watch, outage, cache, crash, harness
    message: str
    excerpt: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"checker": self.checker, "message": self.message, "excerpt": self.excerpt}


def ok(op: Op) -> bool:
    return 200 <= op.status < 300


def acked_write_revs(h: History, truth: Recorder) -> list[tuple[float, int, Op]]:
    """(end time, revision, op) of every acknowledged write, the revision as etcd recorded it."""
    out = []
    for op in h.ops:
        if op.kind in WRITES and ok(op):
            rev = op.rv
            if op.kind == "delete":
                ev = find_delete(truth, op)
                rev = ev.rev if ev is not None else None
            if rev:
                out.append((op.end, rev, op))
    out.sort(key=lambda x: x[0])
    return out


def find_delete(truth: Recorder, op: Op):
    """The etcd DELETE of an acknowledged delete: its key (names are never reused), and the deleted content
    when the answer carried the object (ConfigMaps answer a Status, as upstream)."""
    for e in truth.events_between((op.rv or 1) - 1, truth.progress):
        if e.type == "DELETE" and e.name == op.name and (op.opid is None or e.opid == op.opid):
            return e
    return None


# --- no acknowledged write lost, nothing unexplained ----------------------------------------------------

def check_writes(h: History, truth: Recorder, final: dict | None) -> list[Violation]:
    out: list[Violation] = []
    issued: dict[str, Op] = {}
    deletes_issued: dict[str, int] = {}
    for op in h.ops:
        if op.kind in ("create", "update") and op.opid:
            issued[op.opid] = op
        elif op.kind == "delete":
            deletes_issued[op.name] = deletes_issued.get(op.name, 0) + 1
    prev_of: dict[int, object] = {}  # index of the previous event of the same name, per event
    last: dict[str, object] = {}
    for e in truth.events:
        prev_of[id(e)] = last.get(e.name)
        last[e.name] = e
    for op in h.ops:
        if op.kind not in WRITES or not ok(op):
            continue
        if op.kind == "delete":
            if find_delete(truth, op) is None:
                out.append(Violation("writes", f"acknowledged delete of {op.name} (rv {op.rv}) is not in etcd's "
                                               "history", [op.brief()] + [e.brief() for e in truth.events
                                                                          if e.name == op.name][-3:]))
            continue
        ev = truth.event_at(op.rv, op.name)
        if ev is None or ev.type != "PUT" or ev.opid != op.opid:
            out.append(Violation("writes", f"acknowledged {op.kind} of {op.name} at rv {op.rv} is not in etcd's "
                                           "history with its content",
                                 [op.brief()] + [e.brief() for e in truth.events if e.name == op.name][-4:]))
            continue
        if op.kind == "create" and not ev.created:
            out.append(Violation("writes", f"acknowledged create of {op.name} overwrote an existing key",
                                 [op.brief(), ev.brief()]))
        if op.kind == "update":
            prev = prev_of.get(id(ev))
            if prev is None or prev.type != "PUT" or prev.rev != op.read_rv:
                out.append(Violation("writes", f"update of {op.name} conditioned on rv {op.read_rv} replaced "
                                               f"another version (lost update)",
                                     [op.brief(), prev.brief() if prev else None, ev.brief()]))
    # Everything etcd holds was written by a client, once.
    seen: dict[str, int] = {}
    dels: dict[str, int] = {}
    for e in truth.events:
        if e.type == "PUT":
            if e.opid not in issued and not (e.opid or "").startswith("setup-"):
                out.append(Violation("writes", f"etcd holds a write nobody issued: {e.opid}", [e.brief()]))
            seen[e.opid] = seen.get(e.opid, 0) + 1
            if seen[e.opid] == 2:
                out.append(Violation("writes", f"write {e.opid} applied twice",
                                     [x.brief() for x in truth.events if x.opid == e.opid]))
        else:
            dels[e.name] = dels.get(e.name, 0) + 1
            if dels[e.name] > deletes_issued.get(e.name, 0):
                out.append(Violation("writes", f"etcd holds a delete of {e.name} nobody issued", [e.brief()]))
    if final is not None:
        model = truth.states_at([final["rev"]])[final["rev"]]
        if model != final["state"]:
            out.append(Violation("writes", "the final state is not explained by the recorded history",
                                 diff_states(model, final["state"], "history", "etcd")))
    return out


# --- reads: fresh and equal to etcd at their RV ---------------------------------------------------------

def check_reads(h: History, truth: Recorder, compactions: list[tuple[float, int]]) -> list[Violation]:
    out: list[Violation] = []
    acked = acked_write_revs(h, truth)
    ends = [a[0] for a in acked]
    # running max of acknowledged revisions by end time, and per name
    run_max = []
    m = 0
    for a in acked:
        m = max(m, a[1])
        run_max.append(m)
    lists = [op for op in h.ops if op.kind in LISTS and ok(op) and op.items is not None]
    by_rv: dict[int, list[Op]] = {}
    for op in lists:
        by_rv.setdefault(op.rv, []).append(op)
    for rev, state in truth.iter_states(by_rv):
        for op in by_rv[rev]:
            out += _check_list(op, state, truth, ends, run_max, acked)
    # single-object GETs (the read half of updates): a version etcd had, no older than the last acked write
    per_name: dict[str, list] = {}
    for end, rev, op in acked:
        per_name.setdefault(op.name, []).append((end, rev))
    for op in h.ops:
        if op.kind != "get" or not ok(op):
            continue
        ev = truth.event_at(op.rv, op.name)
        if ev is None or ev.opid != op.opid:
            out.append(Violation("reads", f"GET {op.name} returned a version etcd never had",
                                 [op.brief()] + [e.brief() for e in truth.events if e.name == op.name][-3:]))
            continue
        before = [rev for end, rev in per_name.get(op.name, []) if end < op.start]
        if before and op.rv < max(before):
            out.append(Violation("reads", f"stale GET {op.name}: rv {op.rv} < acknowledged {max(before)}",
                                 [op.brief()]))
    # 410 on a paged list's continuation or an Exact list: only when its RV was really compacted
    for op in h.ops:
        if op.status == 410 and op.kind in ("list_paged", "list_exact"):
            rv = (op.pages[0] if op.pages else None) if op.kind == "list_paged" else op.read_rv
            if rv is not None and not compacted_before(compactions, rv, op.end):
                out.append(Violation("reads", f"{op.kind} at rv {rv} got 410 without a compaction past it",
                                     [op.brief()]))
    return out


def _check_list(op: Op, state: dict, truth: Recorder, ends, run_max, acked) -> list[Violation]:
    """One successful list against etcd's state at its RV (and, if consistent, its freshness)."""
    out: list[Violation] = []
    if op.kind == "list_exact" and op.rv != op.read_rv:
        out.append(Violation("reads", f"Exact list at rv {op.read_rv} answered at rv {op.rv}", [op.brief()]))
        return out
    if op.kind in CONSISTENT:
        i = bisect.bisect_left(ends, op.start) - 1   # writes acknowledged before the list was sent
        if i >= 0 and op.rv < run_max[i]:
            w = max(acked[:i + 1], key=lambda a: a[1])[2]
            out.append(Violation("reads", f"stale {op.kind}: rv {op.rv} older than write acknowledged "
                                          f"before it was sent (rv {run_max[i]})", [w.brief(), op.brief()]))
            return out
    if op.pages and len(set(op.pages)) != 1:
        out.append(Violation("reads", f"paged list pages at different RVs {op.pages}", [op.brief()]))
        return out
    got = {n: (rv, o) for n, rv, o in op.items}
    if len(got) != len(op.items):
        out.append(Violation("reads", f"{op.kind} returned an item twice", [op.brief()]))
    want = state
    if op.shard:   # a sharded list is exactly etcd's state filtered to its range
        in_shard = truth.in_shard(op.shard)
        want = {n: v for n, v in want.items() if in_shard(n)}
    if got != want:
        out.append(Violation("reads", f"{op.kind} at rv {op.rv} differs from etcd's state at that rv",
                             [op.brief()] + diff_states(want, got, "etcd", "list")))
    return out


def compacted_before(compactions: list[tuple[float, int]], rv: int, t: float) -> bool:
    """Some compaction at a revision > rv was done before time t."""
    return any(c_t <= t and c_rev > rv for c_t, c_rev in compactions)


# --- watches: ordered, unique, reliable, resumable, bookmarks --------------------------------------------

# A watch still open when the traffic stops must have delivered every write acknowledged this long before.
WATCH_LAG = 8.0


def check_watches(h: History, truth: Recorder, compactions: list[tuple[float, int]]) -> list[Violation]:
    out: list[Violation] = []
    for ch in h.chains:
        out += check_zero_chain(ch, truth) if ch.from_zero else check_chain(ch, truth, compactions)
    stop = h.marks.get("traffic_stop")
    if stop is not None:
        acked = [(end, rev, op.name) for end, rev, op in acked_write_revs(h, truth) if end <= stop - WATCH_LAG]
        for ch in h.chains:
            in_shard = truth.in_shard(ch.shard)
            due = max((rev for _, rev, name in acked if in_shard(name)), default=0)
            if (not ch.from_zero and ch.expired is None and ch.sessions and ch.sessions[-1][3] == "stopped"
                    and ch.last_rv() < due):
                out.append(Violation("watch", f"watch chain {ch.client}#{ch.id} fell behind: at rv {ch.last_rv()} "
                                              f"when the traffic stopped, but rv {due} was acknowledged "
                                              f"{WATCH_LAG:.0f} s before", [list(x) for x in ch.sessions[-3:]]))
    return out


def check_chain(ch: WatchChain, truth: Recorder, compactions) -> list[Violation]:
    out: list[Violation] = []
    where = f"watch chain {ch.client}#{ch.id} from rv {ch.start_rv}" + (f" ({ch.shard})" if ch.shard else "")
    last_event = ch.start_rv
    last_bookmark = 0
    delivered = []
    for i, (t, typ, name, rv, opid) in enumerate(ch.events):
        if typ == "BOOKMARK":
            if rv < last_bookmark or rv < last_event:
                out.append(Violation("watch", f"{where}: bookmark went backwards to {rv} (after event "
                                              f"{last_event}, bookmark {last_bookmark})",
                                     _frames(ch.events[max(0, i - 3):i + 1])))
            last_bookmark = max(last_bookmark, rv)
            continue
        if rv <= last_event or rv <= last_bookmark:
            out.append(Violation("watch", f"{where}: event at rv {rv} not after {max(last_event, last_bookmark)} "
                                          "(out of order or repeated)", _frames(ch.events[max(0, i - 3):i + 1])))
        last_event = max(last_event, rv)
        delivered.append((rv, typ, name, opid))
    upto = ch.last_rv()
    if upto > truth.progress:
        out.append(Violation("watch", f"{where}: saw rv {upto} beyond what etcd had ({truth.progress})",
                             _frames(ch.events[-3:])))
        return out
    # a sharded watch: exactly etcd's stream filtered to its range
    in_shard = truth.in_shard(ch.shard)
    want = [(e.rev, e.watch_type(), e.name, e.opid) for e in truth.events_between(ch.start_rv, upto)
            if in_shard(e.name)]
    got = sorted(set(delivered))
    if got != want:
        n = min(len(got), len(want))
        i = next((k for k in range(n) if got[k] != want[k]), n)
        if i < len(want) and (i >= len(got) or want[i] < got[i]):
            what, at = f"missing {want[i]}", want[i][0]
        else:
            what, at = f"unexpected {got[i]}", got[i][0]
        near = [list(s) for s in ch.sessions if s[2] <= at][-2:]   # the sessions around the difference
        out.append(Violation("watch", f"{where}: delivered events differ from etcd's between rv {ch.start_rv} "
                                      f"and {upto} (first difference at #{i}: {what})",
                             [{"etcd": list(want[max(0, i - 2):i + 3])}, {"watch": list(got[max(0, i - 2):i + 3])},
                              {"sessions": near}]))
    for s in ch.sessions:
        if s[1] - s[0] > s[4] + WATCH_MARGIN:
            out.append(Violation("watch", f"{where}: a watch with timeoutSeconds={s[4]} ran {s[1] - s[0]:.1f} s "
                                          f"({s[3]})", [list(s)]))
    if ch.expired is not None:
        t, frm, msg = ch.expired
        if not compacted_before(compactions, frm, t):
            out.append(Violation("watch", f"{where}: 410 resuming from rv {frm} that etcd has not compacted",
                                 [{"t": round(t, 3), "from_rv": frm, "message": msg},
                                  {"compactions": [c for c in compactions if c[0] <= t][-2:]},
                                  {"last sessions": [list(s) for s in ch.sessions[-2:]]}]))
    return out


def check_zero_chain(ch: WatchChain, truth: Recorder) -> list[Violation]:
    """A watch from resourceVersion=0: ADDED events making up etcd's state at some revision R (filtered by
    the chain's shard), then exactly etcd's events after R, in order. Which events are the initial ones is not
    marked on the wire, so every split of the leading ADDED events is tried; R is the last revision of the
    range before the first live event (no later than the stream's end), and no earlier than every initial
    object's RV."""
    in_shard = truth.in_shard(ch.shard)
    evs = [(rv, typ, name, opid) for _, typ, name, rv, opid in ch.events if typ != "BOOKMARK"]
    lead = next((i for i, e in enumerate(evs) if e[1] != "ADDED"), len(evs))
    revs = [e.rev for e in truth.events if in_shard(e.name)]
    for k in range(lead, -1, -1):
        init, live = evs[:k], evs[k:]
        floor = max((e[0] for e in init), default=truth.start_rev)
        if any(b[0] <= a[0] for a, b in zip(live, live[1:])) or (live and live[0][0] <= floor):
            continue
        got = {name: (rv, opid) for rv, _, name, opid in init}
        if len(got) != len(init):
            continue
        if live:   # R: the range's last revision before the first live event (those after R are all delivered)
            i = bisect.bisect_right(revs, live[0][0] - 1) - 1
            cands = [max(floor, revs[i] if i >= 0 else 0)]
        else:      # the stream may have ended at any revision after the state
            cands = [floor] + [x for x in revs if x > floor]
        for r, full in truth.iter_states(cands):   # one sweep over the candidates
            if len(full) < len(got) or {n: v for n, v in full.items() if in_shard(n)} != got:
                continue
            upto = live[-1][0] if live else r
            want = [(e.rev, e.watch_type(), e.name, e.opid) for e in truth.events_between(r, upto)
                    if in_shard(e.name)]
            if live == want:
                return []
    where = f"watch chain {ch.client}#{ch.id} from rv 0" + (f" ({ch.shard})" if ch.shard else "")
    return [Violation("watch", f"{where}: its events are not etcd's state at any revision followed by the events "
                               "after it", [{"events": [list(e) for e in evs[:8]]}, {"sessions": [list(x) for x in
                                                                                          ch.sessions]}])]


def _frames(frames) -> list:
    return [{"t": round(t, 3), "type": typ, "name": n, "rv": rv, "op": o} for t, typ, n, rv, o in frames]


# --- outage behaviour ---------------------------------------------------------------------------------------

def check_outage(h: History, request_timeout: float, margin: float, no_answer_ok: list[tuple[float, float]],
                 etcd_fault: tuple[float, float] | None) -> tuple[list[Violation], dict]:
    """Every answer a Status with an expected code, none longer than the request timeout, no dropped
    connections outside the windows where the apiserver itself was down; readyz fails within 5 s of etcd
    going away and passes within 30 s of its return."""
    out: list[Violation] = []
    for op in h.ops:
        dur = op.longest if op.longest is not None else op.end - op.start
        if dur > request_timeout + margin:
            out.append(Violation("outage", f"{op.kind} ran {dur:.1f} s (request timeout {request_timeout:.0f} s)",
                                 [op.brief()]))
        if op.status == 0:
            if not any(a <= op.end and op.start <= b for a, b in no_answer_ok):
                out.append(Violation("outage", f"{op.kind} got no answer ({op.error})", [op.brief()]))
        elif op.status >= 300:
            if op.status not in ALLOWED_ERRORS:
                out.append(Violation("outage", f"{op.kind} answered {op.status}", [op.brief()]))
            elif not op.status_kind:
                out.append(Violation("outage", f"{op.kind} answered {op.status} without a Status", [op.brief()]))
            elif op.status == 429 and "(Retry-After None)" in (op.error or ""):
                out.append(Violation("outage", f"{op.kind} answered 429 without Retry-After", [op.brief()]))
    info: dict = {}
    if etcd_fault is not None:
        a, b = etcd_fault
        for path, probes in (("readyz", h.readyz), ("livez", h.livez)):
            down = [t for t, st in probes if a <= t and st != 200]
            first_fail = down[0] - a if down else None
            info[f"{path}_failed_after"] = first_fail
            if first_fail is None or first_fail > 5.0:
                out.append(Violation("outage", f"/{path} did not fail within 5 s of etcd going away "
                                               f"(first failure after {first_fail})",
                                     [{"t": round(t, 2), "status": st} for t, st in probes if a - 1 <= t <= a + 6]))
    return out, info


def recovery_time(h: History, fault_end: float | None) -> float | None:
    """From the end of the fault until /readyz passes and a write is acknowledged again."""
    if fault_end is None:
        return None
    ready = next((t for t, st in h.readyz if t >= fault_end and st == 200), None)
    write = min((op.end for op in h.ops if op.kind in WRITES and ok(op) and op.start >= fault_end), default=None)
    if ready is None or write is None:
        return None
    return max(ready, write) - fault_end


def diff_states(a: dict, b: dict, an: str, bn: str, limit: int = 6) -> list:
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append({"name": k, an: a.get(k), bn: b.get(k)})
            if len(out) >= limit:
                break
    return out


# --- linearizability of each object's history ---------------------------------------------------------------

def check_linearizable(h: History, truth: Recorder) -> list[Violation]:
    """A linearizability check of every object's recorded history, as porcupine does for etcd's robustness
    tests, with a register model per key: writes (create, update = compare-and-swap on resourceVersion, delete),
    reads (GET), and the failures that are answers too (409 on an update, 404). Every written value is unique
    and every update is conditioned on the version it read, so the order of the writes that took effect is
    forced (etcd's revision order, the only candidate); what is left to decide is whether linearization points
    exist, each inside its operation's interval [sent, answered] (an indeterminate write that took effect:
    [sent, inf)), increasing with that order, each read inside its version's lifetime, each 409 / 404 at a
    moment the version it was conditioned on / the object was not current. Earliest points are optimal
    (every constraint is a lower bound except the upper ends), so one greedy pass per key decides it."""
    out: list[Violation] = []
    INF = float("inf")
    by_name: dict[str, list] = {}
    ops_by_opid = {op.opid: op for op in h.ops if op.kind in ("create", "update") and op.opid}
    deletes: dict[str, list[Op]] = {}
    for op in h.ops:
        if op.kind == "delete":
            deletes.setdefault(op.name, []).append(op)
    # versions per key in etcd order: (rev, type, op interval start, end)
    for e in truth.events:
        by_name.setdefault(e.name, [])
    for e in truth.events:
        if e.type == "PUT":
            op = ops_by_opid.get(e.opid)
            if op is None:
                continue   # not issued by the traffic (check_writes reports it)
            end = op.end if ok(op) else INF
            by_name[e.name].append((e.rev, "PUT", op.start, end, op))
        else:
            cands = [d for d in deletes.get(e.name, []) if d.opid is None or d.opid == e.opid]
            if not cands:
                continue
            # the acknowledged delete of this key if there is one, else the earliest indeterminate one
            acked = [d for d in cands if ok(d)]
            d = acked[0] if acked else min(cands, key=lambda d: d.start)
            by_name[e.name].append((e.rev, "DELETE", d.start, d.end if ok(d) else INF, d))
    reads: dict[str, list[Op]] = {}
    for op in h.ops:
        if op.name and ((op.kind == "get" and (ok(op) or op.status == 404))
                        or (op.kind in WRITES and op.status in (404, 409))):
            reads.setdefault(op.name, []).append(op)
    for name, versions in by_name.items():
        versions.sort(key=lambda v: v[0])
        out += _linearize(name, versions, reads.get(name, []))
    return out


def _linearize(name: str, versions: list, reads: list[Op]) -> list[Violation]:
    out: list[Violation] = []
    index = {v[0]: i for i, v in enumerate(versions)}
    of_version: dict[int, list[Op]] = {}
    failures: list[Op] = []
    for op in reads:
        if op.kind == "get" and ok(op):
            if op.rv in index and versions[index[op.rv]][1] == "PUT":
                of_version.setdefault(index[op.rv], []).append(op)
            # a GET of a version etcd never had is check_reads' finding
        else:
            failures.append(op)
    points: list[float] = []
    t, why = float("-inf"), None     # the earliest next point, and the operation that forces it
    for i, (rev, typ, start, end, wop) in enumerate(versions):
        p = max(start, t)
        if p > end:
            if why is not None and why.kind == "get":
                msg = (f"{name}: GET sent at {why.start:.3f} returned rv {why.rv}, but rv {rev} (the next version) "
                       f"was answered at {end:.3f}, before it (a stale read)")
            else:
                msg = (f"{name}: {wop.kind} at rv {rev} was answered at {end:.3f}, before the {why.kind} that "
                       f"precedes it in etcd's order was sent ({why.start:.3f})")
            out.append(Violation("linearizability", msg, [why.brief(), wop.brief()]))
            return out
        points.append(p)
        if p > t:
            t, why = p, wop
        for r in of_version.get(i, []):
            q = max(r.start, p)
            if q > r.end:
                out.append(Violation("linearizability", f"{name}: GET answered at {r.end:.3f} returned rv {rev}, "
                                                        f"written by a request sent only at {start:.3f}",
                                     [wop.brief(), r.brief()]))
                continue
            if q > t:
                t, why = q, r
    for r in failures:
        if r.status == 409:
            i = index.get(r.read_rv)
            if i is None:
                continue
            nxt = points[i + 1] if i + 1 < len(points) else None
            if nxt is None or nxt > r.end:
                out.append(Violation("linearizability", f"{name}: update conditioned on rv {r.read_rv} got 409, "
                                                        f"but rv {r.read_rv} was current for its whole interval",
                                     [versions[i][4].brief(), r.brief()]
                                     + ([versions[i + 1][4].brief()] if i + 1 < len(versions) else [])))
        elif r.status == 404:
            first = next((k for k, v in enumerate(versions) if v[1] == "PUT"), None)
            # absent before the create's latest possible point, or after the delete's earliest
            absent_ok = (first is None or r.start < versions[first][3]
                         or any(v[1] == "DELETE" and points[k] <= r.end for k, v in enumerate(versions)))
            if not absent_ok:
                out.append(Violation("linearizability", f"{name}: {r.kind} got 404 while the object existed for "
                                                        "its whole interval", [versions[first][4].brief(), r.brief()]))
    return out
