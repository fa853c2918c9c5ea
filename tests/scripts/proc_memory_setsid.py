"""Test child: a grandchild that leaves the process group (setsid) and allocates 8 MB at a time up to 384 MB; the
parent only waits for it."""
import os
import sys
import time

pid = os.fork()
if pid == 0:
    os.setsid()  # out of the replica's process group: a group-sum watchdog no longer sees it
    blocks = []
    for _ in range(48):
        blocks.append(b"m" * (8 * 1024 * 1024))
        time.sleep(0.01)
    time.sleep(30)
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) if os.waitstatus_to_exitcode(status) >= 0 else 1)
