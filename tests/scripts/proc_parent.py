"""Test child: a stand-in controller that starts one replica, prints its pid, then waits to be killed.

With a second argument ``cgroup`` the replica starts in its own cgroup (prints ``no-cgroup`` and
exits where there is none) and runs ``proc_cgroup.py sleep``, which prints its own pid first.
"""
import os
import sys
import time

from trials.controller.process.spawn import start_replica
from trials.controller.process.tree import CgroupTree

here = os.path.dirname(os.path.abspath(__file__))
tree = None
script = [os.path.join(here, "proc_sleep.py")]
if sys.argv[2:] == ["cgroup"]:
    tree = CgroupTree.create("live-parent")
    if tree is None:
        print("no-cgroup", flush=True)
        sys.exit(0)
    script = [os.path.join(here, "proc_cgroup.py"), "sleep"]
replica = start_replica(
    [sys.executable, "-I", "-S", *script],
    env={"PATH": os.environ.get("PATH", "")},
    cwd=os.getcwd(),
    stdout_path=sys.argv[1],
    stderr_path=sys.argv[1],
    name="workerpool0-0",
    tree=tree,
)
print(replica.pid, flush=True)
time.sleep(30)
