"""Before a Slurm job's first trial: do the cluster's nodes see the job's folders, and run this Python?

The controller writes a nonce into each folder the trials need (the job's folder, which holds the trial
folders, metric files and launch files, and the ``/gcs`` root of their outputs), then runs one task on a
node (``srun``) with the controller's Python that reads each nonce back and imports the entry. A folder a
node does not see, or sees as another folder, fails the sweep at once with one line, before any trial.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import Sequence

from trials import files
from trials.controller.backend.protocol import BackendError
from trials.controller.slurm import commands
from trials.errors import ConfigError
from trials.printable import printable

TIMEOUT_S = 120.0
_CHECK = (
    "import os, socket, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "try:\n"
    "    import trials.controller.slurm.entry\n"
    "except Exception as err:\n"
    "    print('IMPORT', type(err).__name__, err); sys.exit(3)\n"
    "args = sys.argv[2:]\n"
    "for path, nonce in zip(args[::2], args[1::2]):\n"
    "    try:\n"
    "        got = open(path).read().strip()\n"
    "    except OSError as err:\n"
    "        print('MISSING', path, os.environ.get('SLURMD_NODENAME', ''), socket.gethostname()); sys.exit(4)\n"
    "    if got != nonce:\n"
    "        print('OTHER', path, os.environ.get('SLURMD_NODENAME', ''), socket.gethostname()); sys.exit(4)\n"
    "print('OK', os.environ.get('SLURMD_NODENAME', ''), socket.gethostname())\n"
)


def check_shared(slurm: commands.Slurm, folders: Sequence[str], *, package_root: str,
                 partition: str | None = None, extra: Sequence[str] = (),
                 timeout_s: float = TIMEOUT_S) -> str | None:
    """Check that a node sees ``folders`` as this host does and runs ``sys.executable`` with this package.

    Returns:
        A warning when the check could not run in ``timeout_s`` (the cluster is busy), else None.

    Raises:
        ConfigError: a folder is not shared, or the node cannot run the controller's Python or import
            this package (one line).
    """
    slurm.ping()
    written: list[str] = []
    args: list[str] = []
    try:
        for folder in dict.fromkeys(os.path.abspath(f) for f in folders):
            os.makedirs(folder, exist_ok=True)
            nonce = secrets.token_hex(16)
            path = os.path.join(folder, f".trials-slurm-preflight-{os.getpid()}-{nonce[:8]}")
            files.write_atomic(path, nonce.encode("ascii"))
            written.append(path)
            args += [path, nonce]
        srun = ["-N1", "-n1", "--export=ALL", "--job-name=trials-preflight", "--quiet"]
        if partition:
            srun.append(f"--partition={partition}")
        srun += list(extra)
        try:
            done = slurm.call("srun", *srun, sys.executable, "-c", _CHECK, package_root, *args, timeout=timeout_s,
                              scrubbed=True)
        except BackendError:
            return (f"--runtime slurm: the shared-folder check did not run within {timeout_s:g}s (the cluster may "
                    f"be busy); the trials' folders are assumed shared with the nodes")
        out = done.stdout.decode("utf-8", "replace").split()
        if done.returncode == 0 and out[:1] == ["OK"]:
            return None
        raise ConfigError(_problem(out, done))
    finally:
        for path in written:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _problem(out: list[str], done: subprocess.CompletedProcess[bytes]) -> str:
    if out[:1] in (["MISSING"], ["OTHER"]):
        folder = os.path.dirname(out[1]) if len(out) > 1 else "?"
        node = f"node {out[2]} ({out[3]})" if len(out) >= 4 else "a node"
        seen = "does not see" if out[0] == "MISSING" else "sees another folder at"
        return (f"--runtime slurm: {node} {seen} {printable(folder)}: the job's folder (--root) and its /gcs "
                f"root (--gcs-root) must be on a path every node mounts (NFS, Lustre, a /gcs FUSE mount)")
    if out[:1] == ["IMPORT"]:
        why = printable(" ".join(out[1:])[:200])
        return (f"--runtime slurm: a node's {sys.executable} cannot import trials ({why}): install trials "
                f"where the nodes run the same Python, or run the controller from a shared venv")
    said = commands.last_line(done.stderr)
    if "execve" in said or "No such file" in said:
        return (f"--runtime slurm: a node cannot run {sys.executable} ({said}): the nodes run the controller's "
                f"Python, so it must exist there (e.g. a venv on the shared folder)")
    return f"--runtime slurm: the check on a node failed: {said}"
