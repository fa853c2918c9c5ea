"""Test child: a stand-in controller that starts one replica, prints its pid, then waits to be killed."""
import os
import sys
import time

from trials.controller.process import start_replica

script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "proc_sleep.py")
replica = start_replica(
    [sys.executable, "-I", "-S", script],
    env={"PATH": os.environ.get("PATH", "")},
    cwd=os.getcwd(),
    stdout_path=sys.argv[1],
    stderr_path=sys.argv[1],
    name="workerpool0-0",
)
print(replica.pid, flush=True)
time.sleep(30)
