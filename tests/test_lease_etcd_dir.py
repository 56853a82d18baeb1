"""Where `--embedded-lease-etcd` keeps its data: a tmpfs directory that belongs to the state dir (a random id kept
in the state dir names it), so a deleted state dir never meets its old Leases, and directories no state dir claims
are removed unless an etcd still holds them (storage.embedded.lease_data_dir)."""
from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

from storage.embedded import (LEASE_DIR_PREFIX, LEASE_ID_FILE, MAKING_PREFIX, MAKING_STALE_S, EmbeddedEtcd,
                              lease_data_dir, remove_orphan_lease_dirs)


def test_the_lease_dir_is_kept_for_its_state_dir_and_new_for_a_new_one(tmp_path):
    shm, state = str(tmp_path / "shm"), str(tmp_path / "state")
    os.makedirs(shm)
    first = lease_data_dir(shm, state)
    assert os.path.basename(first).startswith(LEASE_DIR_PREFIX) and os.path.isdir(first)
    assert lease_data_dir(shm, state) == first                  # a restart: the same directory
    with open(os.path.join(state, LEASE_ID_FILE)) as f:
        assert os.path.basename(first) == LEASE_DIR_PREFIX + f.read().strip()
    shutil.rmtree(state)                                        # the state dir deleted and made again
    second = lease_data_dir(shm, state)
    assert second != first and os.path.isdir(second)
    assert not os.path.exists(first), "the directory no state dir claims was left on tmpfs"
    assert os.listdir(shm) == [os.path.basename(second)], "a half-made directory was left behind"


def test_an_unclaimed_lease_dir_is_kept_while_an_etcd_holds_it(tmp_path):
    shm = str(tmp_path / "shm")
    os.makedirs(shm)
    held, idle = lease_data_dir(shm, str(tmp_path / "a")), lease_data_dir(shm, str(tmp_path / "b"))
    old_style = os.path.join(shm, LEASE_DIR_PREFIX + "0123456789ab")   # named after a path's hash, no owner file
    os.makedirs(os.path.join(old_style, "member"))
    with EmbeddedEtcd(data_dir=held) as etcd:
        shutil.rmtree(tmp_path / "a")
        shutil.rmtree(tmp_path / "b")
        assert sorted(remove_orphan_lease_dirs(shm)) == sorted([idle, old_style])
        assert os.path.isfile(os.path.join(held, "member-data", "member", "snap", "db")), "a running etcd's data was removed"
        assert etcd.endpoint
    assert remove_orphan_lease_dirs(shm) == [held]
    assert os.listdir(shm) == []


def test_starts_of_one_state_dir_at_once_agree_on_one_lease_dir(tmp_path):
    """Several starts racing on a state dir without an id yet: the id is created only if absent, and a
    directory made by another start is used, not renamed over (which would fail) nor removed as an orphan."""
    for round_ in range(20):
        shm, state = str(tmp_path / f"shm{round_}"), str(tmp_path / f"state{round_}")
        os.makedirs(shm)
        with ThreadPoolExecutor(8) as pool:
            got = set(pool.map(lambda _: lease_data_dir(shm, state), range(8)))
        assert len(got) == 1, got
        (only,) = got
        assert os.listdir(shm) == [os.path.basename(only)] and os.path.isdir(only)
        with open(os.path.join(state, LEASE_ID_FILE)) as f:
            assert os.path.basename(only) == LEASE_DIR_PREFIX + f.read().strip()
        assert os.listdir(state) == [LEASE_ID_FILE], "a temporary id file was left in the state dir"


def test_a_damaged_id_is_replaced_and_a_stale_half_made_dir_removed(tmp_path):
    shm, state = str(tmp_path / "shm"), str(tmp_path / "state")
    os.makedirs(shm)
    os.makedirs(state)
    with open(os.path.join(state, LEASE_ID_FILE), "w") as f:
        f.write("not-an-id\n")
    stale, fresh = os.path.join(shm, MAKING_PREFIX + "dead"), os.path.join(shm, MAKING_PREFIX + "busy")
    for d in (stale, fresh):
        os.makedirs(d)
    old = time.time() - MAKING_STALE_S - 60
    os.utime(stale, (old, old))
    other = os.path.join(shm, ".making-someone-elses")          # not ours by name: never touched
    os.makedirs(other)
    os.utime(other, (old, old))
    made = lease_data_dir(shm, state)
    with open(os.path.join(state, LEASE_ID_FILE)) as f:
        assert os.path.basename(made) == LEASE_DIR_PREFIX + f.read().strip()
    assert sorted(os.listdir(shm)) == sorted([os.path.basename(made), os.path.basename(fresh), ".making-someone-elses"])
