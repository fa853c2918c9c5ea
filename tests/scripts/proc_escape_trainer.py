"""Test trainer (issue 23.1-2): reach the controller through /proc, write through it, forge its lock.

Runs under any python (the unprivileged test uses the system one): no trials, no hypertune.
It walks its parent pids, and scans every pid it can see, for a process holding its job's ``controller.lock``,
then tries (``umount``: in a sandbox only) unmounting the hidden job folder and its /proc, then a
file in the launch folder through ``/proc/<pid>/root``, a forged record appended
to ``journal.log`` through ``/proc/<pid>/root``, and the lock file truncated and rewritten as
``pid <victim>`` through ``/proc/<pid>/fd/<n>``. It writes what it found and did to
``<trial>/escape.json``, reports one metric, then waits (up to 120 s) to be stopped.

    proc_escape_trainer.py VICTIM_PID MARKER [umount]
"""

import json
import os
import sys
import time

victim, marker = int(sys.argv[1]), sys.argv[2]
trial_dir = os.environ["TRIALS_TRIAL_DIR"]
job_dir = os.path.dirname(trial_dir)
launch_dir = os.getcwd()


def ppid(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("utf-8", "replace")
        return int(text[text.rindex(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def lock_fds(pid):
    found = []
    try:
        entries = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for entry in entries:
        try:
            # its own job's lock only: other jobs on this host (tests in other workers, other
            # people's jobs) are not this test's to forge
            if os.readlink(f"/proc/{pid}/fd/{entry}") == os.path.join(job_dir, "controller.lock"):
                found.append(int(entry))
        except OSError:
            continue
    return found


# As root, unmount the hidden job folder and this /proc (CAP_SYS_ADMIN would allow it). Only when
# asked and only as PID 2 of a PID namespace (the sandbox's trainer): in the host's mount namespace
# this would unmount the host's /proc.
unmounted = []
in_sandbox = os.getpid() == 2 and os.getppid() == 1
if "umount" in sys.argv[3:] and in_sandbox:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for target in (job_dir, "/proc"):
        if libc.umount2(target.encode(), 2) == 0:  # MNT_DETACH
            unmounted.append(target)
    if os.path.exists(os.path.join(job_dir, "journal.log")):
        unmounted.append("journal reachable")
host_writes = []  # the host's cgroup and sysctl files (harmless probes: a new empty cgroup, an open)
if in_sandbox:
    with open("/proc/self/cgroup") as f:
        mine = [line.split("::", 1)[1].strip() for line in f if line.startswith("0::")]
    for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        probe = f"{base}{mine[0] if mine else ''}/escape-probe"
        try:
            os.mkdir(probe)
            os.rmdir(probe)
            host_writes.append(probe)
        except OSError:
            pass
    try:
        os.close(os.open("/proc/sys/kernel/printk_ratelimit", os.O_WRONLY))
        host_writes.append("/proc/sys/kernel/printk_ratelimit")
    except OSError:
        pass
ancestors, pid = [], os.getppid()
while pid > 1 and pid not in ancestors:
    ancestors.append(pid)
    pid = ppid(pid)
visible = sorted(int(e) for e in os.listdir("/proc") if e.isdigit())
holders = {p: lock_fds(p) for p in dict.fromkeys([*ancestors, *visible]) if p != os.getpid()}
holders = {p: fds for p, fds in holders.items() if fds}
init_fds = []  # PID 1 of the namespace is the shim's init: what of it can the trainer open?
try:
    init_fd_paths = [f"/proc/1/fd/{n}" for n in os.listdir("/proc/1/fd")]
except OSError:
    init_fd_paths = []
for path in [*init_fd_paths, "/proc/1/environ", "/proc/1/root"]:
    try:
        if path.endswith("/environ"):
            with open(path, "rb") as f:
                f.read()
        else:
            os.listdir(path) if path.endswith("/root") else os.readlink(path)
        init_fds.append(path)
    except OSError:
        pass
done = {"unmounted": unmounted, "host_writes": host_writes, "init_fds": init_fds, "ancestors": ancestors,
        "visible": len(visible), "holders": sorted(holders), "wrote": []}

for p in dict.fromkeys([*holders, *ancestors, *(visible if in_sandbox else [])]):  # outside: its line only
    root = f"/proc/{p}/root"
    try:  # a file in the real launch folder (the trainer's own is an overlay)
        with open(f"{root}{launch_dir}/planted-{p}", "w") as f:
            f.write(marker)
        done["wrote"].append(f"planted through {p}")
    except OSError:
        pass
    try:  # a forged record in the real journal (never created: append to what exists)
        fd = os.open(f"{root}{job_dir}/journal.log", os.O_WRONLY | os.O_APPEND)
        os.write(fd, json.dumps({"op_code": 0, "worker_id": marker, "study_name": marker,
                                 "directions": [1]}).encode() + b"\n")
        os.close(fd)
        done["wrote"].append(f"journal through {p}")
    except OSError:
        pass
for p, fds in holders.items():
    for n in fds:  # the controller's lock: cancel would signal whoever it names
        try:
            fd = os.open(f"/proc/{p}/fd/{n}", os.O_WRONLY | os.O_TRUNC)
            os.write(fd, f"pid {victim}".encode())
            os.close(fd)
            done["wrote"].append(f"lock through {p}/fd/{n}")
        except OSError:
            pass

with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "w") as f:
    f.write(json.dumps({"loss": "0.5", "global_step": "1", "timestamp": time.time()}) + "\n")
tmp = os.path.join(trial_dir, "escape.json.tmp")
with open(tmp, "w") as f:
    json.dump(done, f)
os.replace(tmp, os.path.join(trial_dir, "escape.json"))
time.sleep(120)  # until the cancel stops it
