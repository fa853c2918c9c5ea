"""Each replica in its container view: the host's file system copy-on-write, /gcs, the job folder hidden.

A replica starts through the exec shim (``shim.c``) in new mount and PID namespaces (a user
namespace too when not root) with its own ``/proc``, so it sees no process but its own. As root its
view is the whole host file system copy-on-write (an overlay on / and on each mount under it): a
write anywhere (``pip install --user``, ``/etc``, the home folder) lands in a layer under
``<trial>/sandbox/<replica>.<n>/``, thrown away when the attempt ends (:mod:`layers`: the last failed
attempt's is kept, ``trials gc`` removes it); the launch folder has a layer of its own
(``upper_dir``, what ``trials check`` reads). Without root (a user namespace) the host is read-only
but for the launch folder, the home folder, /tmp and /var/tmp, each copy-on-write. The job folder is
an empty tmpfs with only the trial's own folders mounted back (so no trainer reaches ``journal.log``
or another trial), what a trial keeps (its folder, its ``AIP_*`` outputs) is bound through, and
``/gcs`` is the job's bucket folder. Where that cannot work (not Linux, no compiler, a kernel that
refuses the namespaces, a fresh ``/proc`` or overlayfs, ``TRIALS_SANDBOX=off``) :func:`detect` says
why once and replicas run as plain children (what that does not protect: ``docs/VERTEX_EMULATION.md``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trials import files, protocol
from trials.controller.process import orphans, shim
from trials.controller.process.layers import Layers
from trials.controller.process.replica import Replica
from trials.controller.process.spawn import start_replica
from trials.controller.process.tree import CgroupTree, ProcessTree

OFF_VALUES = ("off", "0", "no", "false")
_PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Sandbox:
    """How this job's replicas start. ``namespace`` is None when the sandbox is off (see ``reason``)."""

    launch_dir: str
    job_dir: str
    gcs_root: str
    namespace: str | None = None  # "mount" (root) or "user" (unprivileged user namespace)
    reason: str = ""
    home: str = ""  # the user's home folder (its passwd entry): copy-on-write in a user namespace

    @property
    def on(self) -> bool:
        return self.namespace is not None

    def describe(self) -> str:
        """One line for the user: what each replica gets, and what is not protected."""
        if self.namespace == "mount":
            return (f"each replica sees the host's files copy-on-write (its writes land in a layer under "
                    f"<trial>/{protocol.SANDBOX_DIR}/, removed when its attempt ends, a failed attempt's kept "
                    f"until trials gc) with its own processes and /proc, /gcs is {self.gcs_root}")
        if self.on:
            return (f"the sandbox runs without root (a user namespace): a trial writes copy-on-write only in "
                    f"{self.launch_dir}, its home folder, /tmp and /var/tmp; the rest of the host's files are "
                    f"read-only to it (a write there fails, where a container's would land in its layer)")
        return (f"the sandbox is off ({self.reason}): trials share {self.launch_dir}, see the host's "
                f"processes, change the host's files for good (pip install --user, the home folder, /etc) "
                f"and have no /gcs (write outputs with --base-output-dir DIR)")


def off(launch_dir: str, job_dir: str, gcs_root: str, reason: str) -> Sandbox:
    return Sandbox(launch_dir=launch_dir, job_dir=job_dir, gcs_root=gcs_root, reason=reason)


def detect(*, launch_dir: str, job_dir: str, gcs_root: str,
           environ: Mapping[str, str] | None = None) -> Sandbox:
    """Decide once per job whether replicas get their container view, by trying it for real."""
    environ = os.environ if environ is None else environ
    launch_dir, job_dir, gcs_root = (os.path.abspath(p) for p in (launch_dir, job_dir, gcs_root))
    if environ.get(protocol.ENV_SANDBOX, "").strip().lower() in OFF_VALUES:
        return off(launch_dir, job_dir, gcs_root, f"{protocol.ENV_SANDBOX}={environ[protocol.ENV_SANDBOX]}")
    if launch_dir == "/":
        return off(launch_dir, job_dir, gcs_root, f"the launch folder {launch_dir} cannot be overlaid")
    try:
        program = shim.shim_path()
    except shim.ShimUnavailable as err:
        return off(launch_dir, job_dir, gcs_root, str(err))
    candidate = Sandbox(launch_dir=launch_dir, job_dir=job_dir, gcs_root=gcs_root,
                        namespace="mount" if os.geteuid() == 0 else "user", home=_passwd_home())
    problem = _probe(candidate, program)
    return off(launch_dir, job_dir, gcs_root, problem) if problem else candidate


def _passwd_home() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return ""


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _probe(sandbox: Sandbox, program: str) -> str | None:
    """Start ``true`` in a throw-away view of the job; the shim's error line when that fails."""
    probe_dir = os.path.join(sandbox.job_dir, f".sandbox-probe-{os.getpid()}")
    _remove_dead_probes(sandbox.job_dir)
    try:
        os.makedirs(sandbox.gcs_root, exist_ok=True)  # the job's buckets: /gcs in every replica
        os.makedirs(probe_dir, exist_ok=True)
        state = new_state_dir(probe_dir, "probe")
        ops = replica_ops(sandbox, state_dir=state, writable=(probe_dir,))
        true = shutil.which("true") or "/bin/true"
        proc = subprocess.run([program, "0", "-", "-", *ops, "--", true],
                              capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return f"the sandbox probe failed: {err}"
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"the sandbox probe exited {proc.returncode}"


def _remove_dead_probes(job_dir: str) -> None:
    """The probe folders of controllers killed during their probe (SIGKILL leaves its ``finally`` unrun)."""
    try:
        names = os.listdir(job_dir)
    except OSError:
        return
    for name in names:
        pid = name.removeprefix(".sandbox-probe-")
        if pid == name or not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive: another controller's probe (a worker of the same job folder)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        path = os.path.join(job_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)


def new_state_dir(trial_dir: str, replica: str) -> str:
    """``<trial>/sandbox/<replica>.<n>``: a fresh folder for a start's layers (removed when it ends,
    :mod:`layers`)."""
    base = os.path.join(trial_dir, protocol.SANDBOX_DIR)
    os.makedirs(base, exist_ok=True)
    n = 0
    while True:
        state = os.path.join(base, f"{replica}.{n}")
        try:
            os.mkdir(state)
            break
        except FileExistsError:
            n += 1
    for name in ("upper", "work", "root", "layers"):
        os.mkdir(os.path.join(state, name))
    return state


def upper_dir(state_dir: str) -> str:
    """Where a sandboxed replica's writes to its launch folder land (as changed files)."""
    return os.path.join(state_dir, "upper")


PRIVATE_FOLDERS = ("/tmp", "/var/tmp")  # copy-on-write in a user namespace's view, with the home folder


def private_folders(sandbox: Sandbox, home: str | None) -> list[str]:
    """The folders a user namespace's replica writes copy-on-write besides its launch folder (the rest of
    the host is read-only there): /tmp, /var/tmp and the home folder (``$HOME`` and the passwd entry's),
    none inside the launch folder or the job folder, a parent before its children.

    One inside another gets a layer of its own all the same: there its own folder needs no copy-up,
    which a user namespace refuses for a folder whose owner or group it does not map (EOVERFLOW)."""
    paths = {os.path.abspath(p) for p in (*PRIVATE_FOLDERS, home or "", sandbox.home) if p}
    return sorted((p for p in paths if p != "/" and not _inside(p, sandbox.launch_dir)
                   and not _inside(p, sandbox.job_dir)), key=len)


def replica_ops(sandbox: Sandbox, *, state_dir: str, writable: Sequence[str], home: str | None = None) -> list[str]:
    """The shim's operations for one replica; ``writable`` folders are mounted through as they are;
    ``home``: the replica's ``$HOME``."""
    user = sandbox.namespace == "user"
    ops = ["ns", str(sandbox.namespace),
           "root", os.path.join(state_dir, "root"), os.path.join(state_dir, "layers"),
           "read-only" if user else "layered"]
    if user:
        for folder in private_folders(sandbox, home):
            ops += ["writable", folder]
    ops += ["overlay", sandbox.launch_dir, upper_dir(state_dir), os.path.join(state_dir, "work")]
    if not _inside(sandbox.launch_dir, sandbox.job_dir):
        ops += ["hide", sandbox.job_dir]  # journal.log and the other trials are out of reach
    chosen: list[str] = []
    for path in sorted({os.path.abspath(p) for p in (*writable, sandbox.gcs_root)}, key=len):
        if not any(_inside(path, parent) for parent in chosen):
            chosen.append(path)
    for path in chosen:
        ops += ["bind", path]
    ops += ["gcs", sandbox.gcs_root, "cd", sandbox.launch_dir]
    return ops


def start_sandboxed(sandbox: Sandbox, argv: Sequence[str], *, env: Mapping[str, str],
                    trial_dir: str, outputs: Sequence[str], replica: str,
                    layers: Layers | None = None, **options: Any) -> Replica:
    """Start one replica in its container view (or as a plain child when the sandbox is off).

    ``outputs``: folders the replica writes through to the host besides its trial folder (its
    local ``AIP_*`` base folder). ``layers``: what removes the start's layers when it ends (None: they
    stay, for the caller to read and remove: ``trials check``). ``options`` go to
    :func:`spawn.start_replica` (log paths, name, echo, memory limit). The replica's ``upper_dir``
    then names where its writes to the launch folder are.
    """
    tree: ProcessTree | None = CgroupTree.create(f"{os.path.basename(trial_dir)}-{replica}")
    orphan_tree = orphans.OrphanTree.create(env) if tree is None else None  # no cgroup: the subreaper
    tree = tree or orphan_tree
    if not sandbox.on:
        started = start_replica(argv, env=env, cwd=sandbox.launch_dir, tree=tree, **options)
    else:
        state = new_state_dir(trial_dir, replica)
        for folder in outputs:
            files.makedirs_beneath(sandbox.gcs_root, folder)
        ops = replica_ops(sandbox, state_dir=state, writable=(trial_dir, *outputs), home=env.get("HOME"))
        try:
            started = start_replica(argv, env=env, cwd=sandbox.launch_dir, tree=tree, shim_ops=ops, **options)
        except BaseException:
            shutil.rmtree(state, ignore_errors=True)  # (the failed start left nothing mounted: its namespace is gone)
            raise
        started.place_upper_dir(upper_dir(state))
        if layers is not None:
            started.on_end = lambda r: layers.ended(state, failed=r.failed_on_its_own)
    if orphan_tree is not None:
        orphan_tree.adopt(started.pid)
    return started
