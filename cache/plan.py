"""Cache or etcd? The LIST/GET routing table of upstream's delegator (S1.14-S1.27), as pure functions.

`plan_list` returns where a list is served and with which semantics:

| # | RV | RVM | limit | continue | plan |
|---|----|-----|-------|----------|------|
| L1 | unset | unset | any | - | consistent (cache after waiting; etcd if progress requests are unreliable) |
| L2 | "0" | unset/NotOlderThan | ignored | - | any (cache, no wait, no limit) |
| L3 | N | NotOlderThan | any | - | not_older_than N (cache, wait <= 3 s) |
| L4 | N | unset | 0 | - | not_older_than N |
| L5 | N | unset | > 0 | - | exact N (snapshot <= N, else etcd) |
| L6 | N | Exact | any | - | exact N |
| L7 | ""/"0" | unset | any | rv > 0 | exact at token rv from the start key |
| L8 | ""/"0" | unset | any | rv = -1 | consistent from the start key |
"""
from __future__ import annotations

from dataclasses import dataclass

CONSISTENT = "consistent"
ANY = "any"
NOT_OLDER_THAN = "not_older_than"
EXACT = "exact"


@dataclass(frozen=True)
class ListPlan:
    source: str          # "cache" | "etcd"
    mode: str            # one of the constants above
    rv: int = 0          # N for not_older_than / exact
    limit: int = 0       # effective limit (0 = none)


class NotReadyError(Exception):
    """The cache cannot answer and the request may not go to etcd (429, S1.25)."""


def plan_list(rv: str | None, rvm: str, limit: int, continue_rv: int | None, *, ready: bool,
              consistent_supported: bool, has_selectors: bool, single_key: bool, cache_rv: int) -> ListPlan:
    """Decide one LIST (validation, S1.2-S1.13, has already run)."""
    limit = max(limit, 0)
    if continue_rv is not None:
        mode, n = (EXACT, continue_rv) if continue_rv > 0 else (CONSISTENT, 0)
    elif rv in (None, ""):
        mode, n = CONSISTENT, 0
    elif rv == "0":
        mode, n = ANY, 0
        limit = 0  # S1.19: RV=0 from the cache ignores limit
    else:
        n = int(rv)
        if rvm == "Exact" or (not rvm and limit > 0):
            mode = EXACT
        else:
            mode = NOT_OLDER_THAN
    if not ready:
        # S1.25: paged lists without selectors can go to etcd; everything else waits (429).
        if limit > 0 and not has_selectors:
            return ListPlan("etcd", mode, n, limit)
        raise NotReadyError()
    if mode == EXACT and single_key:
        return ListPlan("etcd", mode, n, limit)        # S1.20
    if mode == CONSISTENT and not consistent_supported:
        return ListPlan("etcd", mode, n, limit)        # S1.26
    if mode == EXACT and n > cache_rv and not consistent_supported:
        return ListPlan("etcd", mode, n, limit)        # S1.26
    return ListPlan("cache", mode, n, limit)


def plan_get(rv: str | None, *, ready: bool) -> str:
    """S1.14-S1.16: "etcd" for RV unset (quorum) or an unready cache at RV 0; else "cache"."""
    if rv in (None, ""):
        return "etcd"
    if not ready:
        if rv == "0":
            return "etcd"
        raise NotReadyError()
    return "cache"
