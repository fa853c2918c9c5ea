"""A real two-node Slurm cluster on this machine, in a temp folder, for the Slurm tests and benchmark.

Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them): a private ``munged`` on its own socket,
``slurmctld`` and two ``slurmd`` (nodes n1 and n2, one CPU, 2000 MB and one fake GPU each) on free
ports, so clusters of parallel test workers never meet. The configuration is the one measured in
``../shared/reference/slurm.md``. Commands reach it through ``SLURM_CONF`` (:attr:`MiniCluster.env`).
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

_NODE_MARK = "TRIALS_TEST_SLURM_NODE"  # in each slurmd's environment: its cluster folder and node name
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "scontrol")


def missing() -> str | None:
    """Why a cluster cannot start here (None: it can)."""
    for program in DAEMONS:
        if shutil.which(program) is None and not Path("/usr/sbin", program).exists():
            return f"{program} is not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the test cluster's slurmd runs as root"
    for device in ("/dev/tty0", "/dev/tty1"):
        if not os.path.exists(device):
            return f"{device} (the fake GPU's device file) does not exist"
    return None


def need_slurm() -> None:
    """Skip the test where a cluster cannot start (fail instead under ``TRIALS_REQUIRE_SLURM=1``)."""
    import pytest

    why = missing()
    if why is not None:
        if os.environ.get("TRIALS_REQUIRE_SLURM") == "1":
            pytest.fail(f"TRIALS_REQUIRE_SLURM=1 but {why}")
        pytest.skip(why)


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _sbin(program: str) -> str:
    return shutil.which(program) or f"/usr/sbin/{program}"


class MiniCluster:
    """Two nodes (n1, n2) with one fake GPU each, in partition ``debug``."""

    def __init__(self, root: Path, *, nodes: int = 2, private: tuple[str, ...] = (), slurmd_timeout_s: int = 20):
        """``private``: folders each node sees as an empty folder of its own (a tmpfs in the node's own mount
        namespace): paths that are not shared with the controller's host."""
        self.root = Path(root)
        self.private = tuple(private)
        self.slurmd_timeout_s = slurmd_timeout_s  # a node silent this long is DOWN (its jobs NODE_FAIL)
        self.nodes = [f"n{k + 1}" for k in range(nodes)]
        self.host = socket.gethostname()
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        root = self.root
        for sub in ("state", "spool", "log", "munge"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        ctld_port, *node_ports = _free_ports(1 + len(self.nodes))
        node_lines = [
            f"NodeName={name} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={port} CPUs=1 RealMemory=2000 "
            f"Gres=gpu:1 State=UNKNOWN" for name, port in zip(self.nodes, node_ports, strict=False)]
        self.conf.write_text("\n".join([
            "ClusterName=trials-test",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool/%n",
            f"SlurmctldPidFile={root}/slurmctld.pid",
            f"SlurmdPidFile={root}/slurmd.%n.pid",
            f"SlurmctldLogFile={root}/log/slurmctld.log",
            f"SlurmdLogFile={root}/log/slurmd.%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=1,sched_min_interval=100000",  # heterogeneous jobs start at once
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdTimeout={self.slurmd_timeout_s}",
            "KillWait=5",
            "MinJobAge=600",
            *node_lines,
            f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        devices = ["/dev/tty0", "/dev/tty1", "/dev/tty2", "/dev/tty3"]
        (root / "gres.conf").write_text("".join(
            f"NodeName={name} Name=gpu File={devices[k]}\n" for k, name in enumerate(self.nodes)))
        key = root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)

    def start(self, timeout_s: float = 60.0) -> MiniCluster:
        self.write_config()
        m = self.root / "munge"
        self._spawn("munged", [_sbin("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={m / 'munge.key'}", f"--pid-file={m / 'munged.pid'}",
                               f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'munged.seed'}"])
        self._wait(lambda: self.munge_socket.exists(), timeout_s, "munged's socket")
        self._spawn("slurmctld", [_sbin("slurmctld"), "-D", "-f", str(self.conf)])
        for name in self.nodes:
            self.start_node(name)
        self._wait(self._all_idle, timeout_s, "both nodes idle")
        return self

    def start_node(self, name: str) -> None:
        argv = [_sbin("slurmd"), "-D", "-f", str(self.conf), "-N", name]
        if self.private:
            mounts = " && ".join(f"mount -t tmpfs tmpfs {shlex.quote(d)}" for d in self.private)
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    f"{mounts} && exec {shlex.join(argv)}"]
        self._spawn(f"slurmd-{name}", argv, node=name)

    def _spawn(self, key: str, argv: list[str], node: str | None = None) -> None:
        log = open(self.root / "log" / f"{key}.out", "ab")  # noqa: SIM115 (the daemon's own)
        env = {**self.env, **({_NODE_MARK: f"{self.root}:{node}"} if node else {})}  # its step daemons inherit it
        self.procs[key] = subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)
        log.close()

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        done = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def _all_idle(self) -> bool:
        try:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=10)
        except subprocess.TimeoutExpired:
            return False
        states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
        return all(states.get(n, "").rstrip("*") in ("idle", "mix", "alloc") for n in self.nodes)

    def _wait(self, ok, timeout_s: float, what: str) -> None:
        end = time.monotonic() + timeout_s
        while not ok():
            for key, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{key} exited with {proc.returncode}: {self.log_tail(key)}")
            if time.monotonic() > end:
                raise RuntimeError(f"the test cluster did not come up ({what}) in {timeout_s:.0f}s: "
                                   f"{self.log_tail('slurmctld')}")
            time.sleep(0.1)

    def log_tail(self, key: str) -> str:
        path = self.root / "log" / f"{key}.out"
        text = path.read_text(errors="replace") if path.exists() else ""
        ctld = self.root / "log" / "slurmctld.log"
        if key == "slurmctld" and ctld.exists():
            text += ctld.read_text(errors="replace")
        return " | ".join(text.strip().splitlines()[-5:])

    def kill_node(self, name: str) -> list[int]:
        """Lose node ``name`` whole: its slurmd, its step daemons and everything they run (SIGKILL)."""
        proc = self.procs.pop(f"slurmd-{name}")
        killed = [proc.pid]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for pid in _of_node(self, name):
            killed += _kill_tree(pid)
        return killed

    def stop(self) -> None:
        self.run("scancel", "--full", "--user=root", check=False)
        for key in reversed(list(self.procs)):
            proc = self.procs[key]
            if proc.poll() is None:
                with _suppress():
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with _suppress():
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for name in self.nodes:
            for pid in _of_node(self, name):
                _kill_tree(pid)
        self.procs.clear()


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], ProcessLookupError | PermissionError)  # type: ignore[arg-type]


def _of_node(cluster: MiniCluster, name: str) -> list[int]:
    """The processes of node ``name`` of ``cluster``: its step daemons (they inherit slurmd's mark) and its
    tasks (their ``SLURMD_NODENAME`` and ``SLURM_CONF``)."""
    mark = f"{_NODE_MARK}={cluster.root}:{name}".encode()
    task = {f"SLURMD_NODENAME={name}".encode(), f"SLURM_CONF={cluster.conf}".encode()}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = set(Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if mark in env or task <= env:
            pids.append(int(entry))
    return pids


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def _kill_tree(pid: int) -> list[int]:
    kids = _children()
    order, todo = [], [pid]
    while todo:
        p = todo.pop()
        order.append(p)
        todo += kids.get(p, [])
    for p in order:
        with _suppress():
            os.kill(p, signal.SIGKILL)
    return order
