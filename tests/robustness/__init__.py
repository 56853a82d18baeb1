"""A robustness suite in the spirit of etcd's tests/robustness (issue 10): random traffic from many clients
over real HTTP against a real apiserver process and a real etcd, one injected fault per scenario, a ground
truth recorded by a watch opened directly on etcd before the traffic, and checkers over the whole recorded
history (no acknowledged write lost, no stale or inconsistent list, watches ordered, unique, reliable and
resumable, the cache equal to etcd at the end, outage behaviour, no crash).

`python -m tests.robustness --scenario NAME --seed N --duration S --rate R` (see `__main__`); the short
form of every scenario runs in tests/test_robustness.py.

Modules: `cluster` (etcd and apiserver processes we start and fault), `truth` (the etcd-side recorder and
the states it reconstructs), `traffic` (the clients and their history), `checkers`, `scenarios`.
"""
