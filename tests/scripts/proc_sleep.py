"""Test child: optionally ignore SIGTERM ("ignore-term"), say "ready", then sleep."""
import signal
import sys
import time

if "ignore-term" in sys.argv[1:]:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(30)
