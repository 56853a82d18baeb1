"""The sharded slice (issue 11 §2-3): K resident shards, the front, and K sharded controllers.

A layer above `apiserver` (tests/test_layers.py): it may import anything below and nothing imports it.

* `shardslice.widgets`: the custom resource the controllers reconcile (`widgets.slice.example.com`) and the
  status a reconcile writes.
* `shardslice.controller`: one controller replica pinned to one hash range, reconciling through a sharded
  informer (watch-list, else list + watch, with `shardSelector`) on its own shard.
* `shardslice.launcher`: `python -m shardslice up --shards K`: etcd, K shards, the front, K controllers.
"""
