"""A replica's entry on its Slurm node: ``python -m trials.controller.slurm.entry LAUNCH_FILE`` under ``srun``.

Each task of the submission's step is one replica (task ``SLURM_PROCID`` of the launch file's list). The
entry writes where it listens (the node's host name and the replica's port), waits until every replica of
the submission wrote its own, builds CLUSTER_SPEC, TF_CONFIG and MASTER_ADDR/MASTER_PORT from those real
addresses, and runs the trainer with the launch file's environment (nothing of the node's but Slurm's own
``SLURM_*`` variables and the GPUs Slurm assigned: ``CUDA_VISIBLE_DEVICES``, or none), its folder and its
log files, in a process group of its own, dying with the entry. Slurm's own signals (``scancel``, its time
limit) reach every process of the step, the trainer's too; the controller's per-replica signals come
through a signal file, which the entry forwards to the trainer's group. It kills it over its memory limit, kills
what the trainer left running when it exits, and writes the exit (Vertex-style status) for the controller,
then exits with the same status.

Standard library and this package's vocabulary only: it starts before each trainer on every node.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from trials import files
from trials.controller.process.deathsig import die_with_parent, libc_prctl
from trials.controller.process.groups import group_members, group_rss_bytes, kill_group
from trials.controller.slurm import launchfile as lf
from trials.printable import printable

POLL_S = 0.05
SIGNAL_POLL_S = 0.1
MEMORY_POLL_S = 0.5
LEFTOVER_GRACE_S = 2.0
EXIT_SETUP = 1  # the entry itself could not start the trainer (its message is in the replica's stderr log)
_SLURM_PREFIXES = ("SLURM_", "SLURMD_")
_GPU_VARS = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES")


def node_env(launch_env: Mapping[str, str], own: Mapping[str, str], *, gpus: int) -> dict[str, str]:
    """The trainer's environment: the launch file's, Slurm's ``SLURM_*`` variables, and the GPUs Slurm
    assigned to this task (``gpus`` > 0), else ``CUDA_VISIBLE_DEVICES=""`` (a replica that asked for
    no accelerator sees none, as on a Vertex VM without one)."""
    env = dict(launch_env)
    env.update({k: v for k, v in own.items() if k.startswith(_SLURM_PREFIXES)})
    for key in _GPU_VARS:
        env.pop(key, None)
    if gpus > 0:
        env.update({k: own[k] for k in _GPU_VARS if k in own})
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def gather_addresses(launch: Mapping[str, Any], me: str, host: str, port: int, *,
                     clock: Any = time.monotonic, sleep: Any = time.sleep) -> dict[str, tuple[str, int]]:
    """Write this replica's address, wait for the submission's other replicas' (up to ``wait_s``),
    and read the trial's other replicas' current ones. Returns name -> (host, port)."""
    rdv = str(launch["rendezvous"])
    sub = str(launch["submission"])
    os.makedirs(rdv, exist_ok=True)
    lf.write_json(lf.addr_path(rdv, me), {"submission": sub, "host": host, "port": port})
    mine = [str(r["name"]) for r in launch["replicas"]]
    others = [str(n) for n in launch["ranks"] if n not in mine]
    out: dict[str, tuple[str, int]] = {}
    deadline = clock() + float(launch.get("wait_s", 600))
    while True:
        for name in mine:
            if name not in out:
                found = lf.read_address(lf.addr_path(rdv, name), sub)
                if found is not None:
                    out[name] = found
        if len(out) == len(mine) or clock() > deadline:
            break
        sleep(POLL_S)
    for name in others:  # restarted alone: the others run where they last wrote
        found = lf.read_address(lf.addr_path(rdv, name))
        if found is not None:
            out[name] = found
    return out


class _Forward:
    """SIGTERM/SIGINT/SIGHUP to the entry: noted, not forwarded. Slurm signals every process of the step
    (``scancel --signal``, a time limit, a cancel), the trainer's included, so it gets one SIGTERM, as on
    Vertex; the entry stays to write its exit. (A handler, not SIG_IGN: an ignored signal would stay
    ignored in the trainer across exec.)"""

    def __init__(self) -> None:
        self.pending: list[int] = []

    def __call__(self, signum: int, _frame: Any) -> None:
        self.pending.append(signum)


def _say(stderr_fd: int | None, text: str) -> None:
    line = f"trials (slurm entry): {text}\n".encode("utf-8", "replace")
    if stderr_fd is not None:
        try:
            os.write(stderr_fd, line)
            return
        except OSError:
            pass
    sys.stderr.buffer.write(line)
    sys.stderr.flush()


def _leftovers(pgid: int) -> list[str]:
    return [f"{pid} ({_comm(pid)})" for pid, _stat in group_members([pgid]).get(pgid, [])]


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return printable(f.read(64).decode("utf-8", "replace").strip())
    except OSError:
        return "?"


def run(launch: Mapping[str, Any], rank: int, own: Mapping[str, str]) -> int:
    """Run replica ``rank`` of the launch file; returns its Vertex-style exit status."""
    replicas: Sequence[Mapping[str, Any]] = launch["replicas"]
    rep = replicas[rank]
    name = str(rep["name"])
    exit_file = str(rep["exit"])
    signal_file = str(rep["signal"])
    node = own.get("SLURMD_NODENAME", socket.gethostname())
    forward = _Forward()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    stdout_fd = stderr_fd = None
    status, oom, left = EXIT_SETUP, False, list[str]()
    try:
        stdout_fd, stderr_fd = files.open_log(str(rep["stdout"])), files.open_log(str(rep["stderr"]))
        addresses = gather_addresses(launch, name, socket.gethostname(), int(rep["port"]))
        missing = [n for n in (str(r["name"]) for r in replicas) if n not in addresses]
        if missing:
            _say(stderr_fd, f"replica(s) {', '.join(missing)} of this attempt never started "
                            f"(waited {float(launch.get('wait_s', 600)):g}s)")
            return EXIT_SETUP
        env = node_env(lf.with_addresses(rep["env"], addresses), own, gpus=int(rep.get("gpus", 0)))
        argv = [str(a) for a in rep["argv"]]
        if _read_signal(signal_file):  # stopped while it started: the trainer never runs
            status = 128 + (signal.SIGKILL if _read_signal(signal_file).endswith("KILL") else signal.SIGTERM)
            return status
        try:
            prctl = libc_prctl()  # the trainer dies with its entry (Slurm's own kill of the step takes the
            # entry first, and an orphaned trainer would leave the step's process tree)
            proc = subprocess.Popen(argv, env=env, cwd=str(rep["cwd"]), stdin=subprocess.DEVNULL,
                                    stdout=stdout_fd, stderr=stderr_fd, start_new_session=True,
                                    preexec_fn=die_with_parent(os.getpid(), prctl) if prctl else None)
        except OSError as err:
            _say(stderr_fd, f"command {argv[0]!r} could not be executed on node {node}: {err.strerror or err}")
            status = 127 if isinstance(err, FileNotFoundError) else 126
            return status
        status, oom, left = _supervise(proc, rep, signal_file, forward)
        return status
    except (OSError, KeyError, TypeError, ValueError) as err:
        _say(stderr_fd, f"could not start replica {name} on node {node}: {err}")
        return EXIT_SETUP
    finally:
        try:
            lf.write_json(exit_file, {"status": status, "oom": oom, "wall": time.time(), "node": node,
                                      "leftovers": left})
        except OSError as err:
            _say(stderr_fd, f"could not write {exit_file}: {err}")
        for fd in (stdout_fd, stderr_fd):
            if fd is not None:
                os.close(fd)


def _supervise(proc: subprocess.Popen[bytes], rep: Mapping[str, Any], signal_file: str,
               forward: _Forward) -> tuple[int, bool, list[str]]:
    """Wait for the trainer, forwarding signals and enforcing its memory limit; then kill what it left."""
    pgid = proc.pid
    limit = rep.get("memory_limit_mb")
    limit_bytes = int(limit) * 1024 * 1024 if isinstance(limit, int) and limit > 0 else None
    oom = False
    seen_signal = ""
    next_signal = next_memory = 0.0
    while proc.poll() is None:
        now = time.monotonic()
        if now >= next_signal:
            next_signal = now + SIGNAL_POLL_S
            asked = _read_signal(signal_file)
            if asked and asked != seen_signal:
                seen_signal = asked
                kill_group(pgid, signal.SIGKILL if asked.endswith("KILL") else signal.SIGTERM)
        if limit_bytes is not None and now >= next_memory and not oom:
            next_memory = now + MEMORY_POLL_S
            if group_rss_bytes([pgid]).get(pgid, 0) > limit_bytes:
                oom = True
                kill_group(pgid, signal.SIGKILL)
        time.sleep(POLL_S)
    rc = proc.returncode
    status = rc if rc >= 0 else 128 - rc
    left = _leftovers(pgid)
    if left:  # what outlived the trainer: TERM, a short grace, KILL (no child outlives its replica)
        kill_group(pgid, signal.SIGTERM)
        end = time.monotonic() + LEFTOVER_GRACE_S
        while group_members([pgid]).get(pgid) and time.monotonic() < end:
            time.sleep(POLL_S)
        kill_group(pgid, signal.SIGKILL)
    return status, oom, left


def _read_signal(path: str) -> str:
    """``N TERM`` or ``N KILL`` (N counts the requests), else ""."""
    try:
        text = files.read_regular(path, max_bytes=64).decode("ascii", "replace").strip()
    except OSError:
        return ""
    parts = text.split()
    return text if len(parts) == 2 and parts[0].isdigit() and parts[1] in lf.SIGNALS else ""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m trials.controller.slurm.entry LAUNCH_FILE (run by srun)", file=sys.stderr)
        return 2
    launch = lf.read_json(args[0], lf.MAX_LAUNCH_BYTES)
    rank_text = os.environ.get("SLURM_PROCID", "")
    if not isinstance(launch, dict) or launch.get("format") != lf.FORMAT or not rank_text.isdigit():
        print(f"trials (slurm entry): {args[0]} is not a launch file of this version, or SLURM_PROCID is unset",
              file=sys.stderr)
        return 2
    rank = int(rank_text)
    if rank >= len(launch.get("replicas", [])):
        return 0  # a task beyond the replicas (a --slurm-arg that asked for more): nothing to run
    return run(launch, rank, dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
