"""Shared fixtures: a real etcd process on loopback (never a fake store)."""
from __future__ import annotations

import itertools
import os

import pytest

from storage.embedded import EmbeddedEtcd

_counter = itertools.count()


@pytest.fixture(scope="session")
def etcd():
    """One real etcd for the session, on free ports with a temporary data dir."""
    with EmbeddedEtcd() as e:
        yield e


@pytest.fixture
def unique_prefix():
    """A fresh key prefix under /registry so tests never see each other's keys."""
    return f"/registry/t{os.getpid()}x{next(_counter)}"


@pytest.fixture
async def etcd_client(etcd):
    from storage.etcd import EtcdClient
    c = EtcdClient([etcd.endpoint])
    yield c
    await c.close()
