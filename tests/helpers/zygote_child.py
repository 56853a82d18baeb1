"""Run by tests/test_zygote.py as `python -m tests.helpers.zygote_child MODE ...` forked from a zygote."""
import os
import sys
import time

print(f"argv={sys.argv[1:]} cwd={os.getcwd()} env={os.environ.get('ZYGOTE_TEST')} "
      f"own_session={os.getsid(0) == os.getpid()} main={__name__}", flush=True)
mode = sys.argv[1]
if mode == "exit":
    sys.exit(int(sys.argv[2]))
if mode == "message":
    sys.exit("a message to stderr")
if mode == "raise":
    raise ValueError("boom")
if mode == "sleep":
    time.sleep(60)
