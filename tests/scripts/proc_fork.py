"""Test child: fork a grandchild that ignores SIGTERM and sleeps, print its pid, then exit or wait."""
import os
import signal
import sys
import time

child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(30)
    os._exit(0)
print(child, flush=True)
if "wait" in sys.argv[1:]:
    time.sleep(30)
