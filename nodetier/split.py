"""Several tiers splitting the nodes: which tier owns which node's Lease.

The nodes are split as the deployment splits objects over shards: by ranges of the FNV-1a 64 hash (S7.10) of a
field, here the Lease's name (the node's), in `k` equal ranges for `k` tiers, tier `i` owning
[i * 2^64 / k, (i + 1) * 2^64 / k). Each tier is told every tier's URL in order (`--tiers`) and its own place
(`--tier-index`). A request for a Lease another tier owns goes to that tier, streamed as the control-plane proxy
streams (marked with HOP_HEADER, so tiers that disagree on the ranges answer an error instead of passing a
request back and forth); a tier loads and watches only the Leases it owns.
"""
from __future__ import annotations

import ext

HOP_HEADER = "X-Residency-Tier-Hop"


class NodeRanges:
    def __init__(self, tiers: list[str] | None = None, index: int = 0):
        self.tiers = [t.rstrip("/") for t in tiers or []]
        self.index = index
        if self.tiers and not 0 <= index < len(self.tiers):
            raise ValueError(f"tier index {index} is not one of the {len(self.tiers)} tiers")

    @property
    def split(self) -> bool:
        return len(self.tiers) > 1

    def owner(self, name: str) -> int:
        return (ext.fnv1a64(name) * len(self.tiers)) >> 64 if self.split else self.index

    def owns(self, name: str) -> bool:
        return not self.split or self.owner(name) == self.index

    def url_of(self, name: str) -> str:
        return self.tiers[self.owner(name)]

    def describe(self) -> str:
        if not self.split:
            return "every node"
        k, i = len(self.tiers), self.index
        return f"node-name hashes [{i * (1 << 64) // k:#018x}, {(i + 1) * (1 << 64) // k:#018x}) (tier {i} of {k})"
