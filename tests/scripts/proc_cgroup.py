"""Test child: print this process's cgroup line and pid as its first output, then act on argv[1].

``exit N`` exits N; ``signal NAME`` kills itself with that signal; ``sleep`` sleeps (default
SIGTERM action); ``trap`` exits 143 on SIGTERM.
"""
import os
import signal
import sys
import time

with open("/proc/self/cgroup", encoding="ascii") as f:
    unified = [line.strip() for line in f if line.startswith("0::")]
print(os.getpid(), unified[0] if unified else "-", flush=True)
what = sys.argv[1]
if what == "exit":
    sys.exit(int(sys.argv[2]))
if what == "signal":
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))
if what == "trap":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
time.sleep(60)
