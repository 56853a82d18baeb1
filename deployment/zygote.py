"""A zygote: one interpreter that has imported the server, forking every apiserver of a deployment or a slice.

Each `python -m apiserver` imports the same ~470 modules, about 20 MiB of Python heap that no two processes
share. Forked from a process that imported them once, with the objects frozen out of the collector's reach
(`gc.freeze()`: a collection would write to every object's header and copy its page), the children share those
pages until they write to them; what the children touch (reference counts of the objects they use) is copied, the
rest stays one copy for the whole group (measured in the README, "Forked from a zygote").

The launcher talks to the zygote over its stdin and stdout, one JSON object per line:

* launcher -> zygote: ``{"id": N, "module": "apiserver", "args": [...], "cwd": ..., "env": {...}, "log": PATH,
  "session": bool, "deathsig": bool, "name": "front-0"}``
* zygote -> launcher: ``{"id": N, "pid": P}`` once the child is forked (or ``{"id": N, "error": "..."}``),
  ``{"exit": P, "code": C}`` when a child ends (C negative for a signal, as `subprocess` reports it).

A child runs ``MODULE`` as ``python -m MODULE ARGS`` would (`runpy`, argv, stdin from /dev/null, stdout and stderr
appended to its log, its own session if asked, SIGTERM when the zygote dies if asked, `name` as its
/proc/PID/comm since its command line stays the zygote's), then runs the exit handlers
and leaves with its status. The zygote ends when its stdin closes (the launcher exited); children asked to die with
their parent then get SIGTERM, as they would have from the launcher. `ZygoteProcess` gives a child the part of
`subprocess.Popen` the launchers use, so a launcher falls back to `Popen` where a zygote cannot run. What a module
reads from the environment when it is imported, it read in the zygote (the launcher's environment); the servers read
theirs (`RESIDENCY_*`, `ETCD_BIN`) when they run, from the child's own.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

# Modules a front or a shard imports by the time it has served discovery, OpenAPI, lists, watches and /metrics
# (`python -X importtime`, 2026-12-06): apiserver.app and front_server pull in all but the few named after them.
PRELOAD = ("apiserver.flags", "apiserver.app", "apiserver.front_server", "apiserver.openapi", "uvloop",
           "storage.embedded", "ctypes", "encodings.idna", "tracemalloc")


# --------------------------------------------------------------------------- the zygote process


def _prctl(option: int, arg) -> None:
    try:
        import ctypes
        ctypes.CDLL(None).prctl(option, arg)
    except (OSError, AttributeError):
        pass


def set_deathsig() -> None:
    """SIGTERM when this process's parent dies (Linux PR_SET_PDEATHSIG); in a child, before it runs anything."""
    _prctl(1, signal.SIGTERM)


def set_name(name: str) -> None:
    """/proc/PID/comm (what ps and top show): a forked child's command line is the zygote's, so its name says
    which child it is."""
    _prctl(15, name.encode()[:15])     # PR_SET_NAME


def _status(raw: int) -> int:
    return -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def _child(req: dict, closing: list[int]) -> None:
    """In the forked child: become `python -m MODULE ARGS` and never return."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)   # as the interpreter sets them at start-up
        for fd in closing:
            os.close(fd)
        if req.get("session"):
            os.setsid()
        if req.get("deathsig"):
            set_deathsig()
            if os.getppid() != req["zygote"]:
                return            # the zygote died before the signal was armed
        set_name(req.get("name") or req["module"])
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in (null, log):
            if fd > 2:
                os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = ["-m", *req["args"]]
        import runpy
        try:
            runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:                 # sys.exit("message"): printed, status 1, as the interpreter does
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        import atexit
        threading._shutdown()     # what the interpreter does at exit: wait for non-daemon threads
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:      # noqa: BLE001 (a closed log must not keep the child alive)
                pass
        os._exit(code & 0xFF)


def serve(preload: tuple[str, ...] = PRELOAD) -> int:
    """The zygote's loop (`python -m deployment.zygote`)."""
    replies = os.dup(1)
    os.dup2(2, 1)                 # whatever a module prints goes to stderr, not into the replies
    from machinery.memory import limit_malloc_arenas
    limit_malloc_arenas()         # inherited by every child, before any thread could start
    import importlib
    for name in preload:
        importlib.import_module(name)
    if threading.active_count() != 1:
        print(f"zygote: {threading.active_count()} threads after the imports; forking them is unsafe", file=sys.stderr)
        return 1
    import gc
    gc.collect()
    gc.freeze()                   # the imports' objects leave the collector: a collection would dirty their pages
    from machinery.memory import release_free_memory
    release_free_memory()         # the imports' garbage: not inherited by every child
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C reaches the launcher, which stops the children
    set_name("zygote")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    requests = os.fdopen(0, "rb", buffering=0)
    out = os.fdopen(replies, "wb", buffering=0)
    pending = b""
    children: set[int] = set()
    me = os.getpid()

    def reply(msg: dict) -> None:
        try:
            out.write(json.dumps(msg).encode() + b"\n")
        except BrokenPipeError:
            raise SystemExit(0) from None   # the launcher is gone

    def reap() -> None:
        for pid in list(children):
            try:
                done, raw = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                children.discard(pid)
                continue
            if done:
                children.discard(pid)
                reply({"exit": pid, "code": _status(raw)})

    while True:
        try:
            ready, _, _ = select.select([0, wake_r], [], [], 1.0)
        except InterruptedError:
            ready = []
        if wake_r in ready:
            os.read(wake_r, 4096)
        reap()
        if 0 not in ready:
            continue
        chunk = requests.read(65536)
        if not chunk:
            return 0              # the launcher is gone
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            req = json.loads(line)
            try:
                pid = os.fork()
            except OSError as e:
                reply({"id": req["id"], "error": str(e)})
                continue
            if pid == 0:
                _child(dict(req, zygote=me), [wake_r, wake_w, replies])
            children.add(pid)
            reply({"id": req["id"], "pid": pid})


# --------------------------------------------------------------------------- the launcher's side


class ZygoteProcess:
    """A child of the zygote, as much of `subprocess.Popen` as the launchers use."""

    def __init__(self, zygote: "Zygote", pid: int, args: list[str]):
        self._zygote, self.pid, self.args = zygote, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ZygoteError(RuntimeError):
    pass


class Zygote:
    """The launcher's handle on one zygote process, started on first use; thread-safe."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD, cwd: str | None = None, env: dict | None = None):
        self.preload, self.cwd, self.env = preload, cwd, env
        self.proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._next = 0
        self._spawned: dict[int, dict] = {}
        self._exits: dict[int, int] = {}
        self._dead = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "deployment.zygote", *self.preload],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.cwd, env=self.env)
        threading.Thread(target=self._read, args=(self.proc,), name="zygote-reader", daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                if "exit" in msg:
                    self._exits[msg["exit"]] = msg["code"]
                else:
                    self._spawned[msg["id"]] = msg
                    self._exits.pop(msg.get("pid"), None)    # a pid used again: not the earlier child's status
                self._cond.notify_all()
        proc.stdout.close()
        with self._cond:
            if self.proc is proc:
                self._dead = True
            self._cond.notify_all()

    def spawn(self, argv: list[str], *, log: str, cwd: str, env: dict[str, str], session: bool = True,
              deathsig: bool = False, name: str = "", timeout: float = 60.0) -> ZygoteProcess:
        """Fork `argv` (``[python, "-m", MODULE, *args]``) from the zygote, its output appended to `log`; `name`
        becomes its /proc/PID/comm (the zygote's own is "zygote")."""
        if len(argv) < 3 or argv[1] != "-m":
            raise ZygoteError(f"a zygote runs `python -m MODULE ...`, not {argv[:3]}")
        with self._cond:
            if self.proc is not None and self._dead:    # it died: collect it before starting another
                _collect(self.proc)
                self.proc = None
            if self.proc is None:
                self._dead = False
                self._start()
            self._next += 1
            rid = self._next
            req = {"id": rid, "module": argv[2], "args": argv[3:], "cwd": os.path.abspath(cwd),
                   "env": dict(env), "log": os.path.abspath(log), "session": session, "deathsig": deathsig,
                   "name": name}
            try:
                self.proc.stdin.write(json.dumps(req).encode() + b"\n")
                self.proc.stdin.flush()
            except OSError as e:
                raise ZygoteError(f"the zygote (pid {self.proc.pid}) is gone: {e}") from None
            if not self._cond.wait_for(lambda: rid in self._spawned or self._dead, timeout):
                raise ZygoteError(f"the zygote (pid {self.proc.pid}) did not fork in {timeout:.0f} s")
            msg = self._spawned.pop(rid, None)
        if msg is None or "error" in msg:
            raise ZygoteError(f"the zygote could not fork {argv[2]}: {msg.get('error') if msg else 'it exited'}")
        return ZygoteProcess(self, msg["pid"], argv)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """`pid`'s exit status once it has exited (None if it still runs after `timeout` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if pid in self._exits:
                    return self._exits[pid]
                gone = self._dead or self.proc is None
                if gone and not _alive(pid):
                    return -signal.SIGKILL    # the zygote died first: nobody could read the status
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(0.1 if gone else left)

    def stop(self) -> None:
        """Close the zygote's stdin (it exits) and wait for it; a later `spawn` starts a new one."""
        with self._cond:
            proc, self.proc, self._dead = self.proc, None, False
        if proc is not None:
            _collect(proc)


def _collect(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Close a zygote's stdin (it exits when it reads the end) and wait for it; SIGKILL after `timeout` s."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(serve(tuple(sys.argv[1:]) or PRELOAD))
