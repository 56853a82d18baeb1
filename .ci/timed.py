"""Run one shell command and append its wall and CPU time to a file: `python3 .ci/timed.py FILE COMMAND`.

The CPU time is that of the command's own process tree (getrusage of the children this process reaped), so a
background job of the calling shell that ends meanwhile is not counted in (bash's `time` counts it). The exit
status is the command's."""
import resource
import subprocess
import sys
import time

out, cmd = sys.argv[1], sys.argv[2]
t0 = time.monotonic()
rc = subprocess.run(["bash", "-c", cmd]).returncode
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(out, "a") as f:
    f.write(f"phase `{cmd}`: wall {time.monotonic() - t0:.1f} s, cpu {ru.ru_utime + ru.ru_stime:.1f} s "
            f"({ru.ru_utime:.1f} user + {ru.ru_stime:.1f} sys){'' if rc == 0 else f', exit status {rc}'}\n")
sys.exit(rc)
