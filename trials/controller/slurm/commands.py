"""The Slurm commands the controller runs: ``sbatch``, ``squeue``, ``scancel``, ``scontrol``, ``srun`` (preflight),
``sacct`` where the cluster keeps accounting.

Each is a short subprocess with a timeout; a failure is one line (the command's last line of stderr), a
:class:`trials.controller.backend.protocol.BackendError` where the loop retries it as Vertex retries an
internal error. Which cluster: the controller's own environment (``SLURM_CONF``, the user's defaults).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trials.controller.backend.protocol import BackendError
from trials.controller.slurm.states import merge_states
from trials.errors import ConfigError
from trials.printable import printable

if TYPE_CHECKING:
    from trials.controller.slurm import verdict

PROGRAMS = ("sbatch", "squeue", "scancel", "srun", "scontrol")
CALL_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class JobRow:
    """One component of a Slurm job as ``squeue`` lists it."""

    job_id: str  # the job's (a heterogeneous job's leader) id
    name: str
    comment: str
    state: str
    nodes: str
    reason: str


class Slurm:
    """The cluster's command line, found on ``PATH`` (``environ``: the controller's environment)."""

    def __init__(self, environ: Mapping[str, str] | None = None):
        self.environ = dict(os.environ if environ is None else environ)
        path = self.environ.get("PATH", os.defpath)
        found = {p: shutil.which(p, path=path) for p in PROGRAMS}
        missing = [p for p, at in found.items() if at is None]
        if missing:
            raise ConfigError(f"--runtime slurm: {', '.join(missing)} not found on PATH (Slurm's client "
                              f"commands, e.g. apt-get install slurm-client; SLURM_CONF names the cluster)")
        self.paths: dict[str, str] = {p: at for p, at in found.items() if at is not None}
        self.accounting: bool | None = None  # does the cluster keep accounting (sacct)? None: not asked yet
        conf = self.environ.get("SLURM_CONF")
        if conf and not os.path.isfile(conf):  # Slurm's commands would retry reading it for 60 s
            raise ConfigError(f"--runtime slurm: SLURM_CONF names {printable(conf)!r}, which is not a file "
                              f"(the cluster's slurm.conf)")

    def ping(self) -> None:
        """Raise ConfigError (one line) unless the cluster's controller answers."""
        try:
            done = self.call("scontrol", "ping", timeout=20)
        except BackendError as err:
            raise ConfigError(f"--runtime slurm: the Slurm controller did not answer: {err}") from None
        text = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0 or "UP" not in text:
            said = last_line(done.stderr) if done.stderr.strip() else printable(text.strip()[:200])
            raise ConfigError(f"--runtime slurm: the Slurm controller is not up ({said})")

    def call(self, program: str, *args: str, timeout: float = CALL_TIMEOUT_S, stdin: bytes | None = None,
             scrubbed: bool = False) -> subprocess.CompletedProcess[bytes]:
        """Run one command (``scrubbed``: in :func:`job_env`, for what starts a job)."""
        env = job_env(self.environ) if scrubbed else self.environ
        try:
            return subprocess.run([self.paths[program], *args], input=stdin, capture_output=True,
                                  env=env, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as err:
            raise BackendError(f"{program} did not answer in {timeout:g}s") from err
        except OSError as err:
            raise BackendError(f"{program} could not be run: {err.strerror or err}") from err

    def submit(self, script: str, args: Sequence[str] = ()) -> str:
        """``sbatch --parsable`` of a script read from stdin; the job id."""
        done = self.call("sbatch", "--parsable", *args, stdin=script.encode("utf-8"), scrubbed=True)
        if done.returncode != 0:
            raise BackendError(f"sbatch failed: {last_line(done.stderr)}")
        job_id = done.stdout.decode("ascii", "replace").strip().split(";")[0]
        if not job_id.isdigit():
            raise BackendError(f"sbatch printed no job id: {printable(job_id[:200])!r}")
        return job_id

    def jobs(self, job_ids: Iterable[str] = (), *, user: str | None = None, name: str | None = None) -> list[JobRow]:
        """``squeue`` rows (ended jobs too, while Slurm keeps them): of ``job_ids``, or all of ``user``'s
        (``name``: only those so named)."""
        args = ["-h", "--states=all", "-o", SQUEUE_FORMAT]
        ids = sorted(set(job_ids), key=int)
        if ids:
            args += ["-j", ",".join(ids)]
        elif user:
            args += ["-u", user]
        if name and not ids:
            args += ["-n", name]
        done = self.call("squeue", *args)
        if done.returncode != 0:
            text = last_line(done.stderr)
            if "invalid job id" in text.lower():
                return []  # every one of them is gone from Slurm's memory
            raise BackendError(f"squeue failed: {text}")
        return parse_squeue(done.stdout.decode("utf-8", "replace"))

    def job_word(self, job_id: str, name: str) -> verdict.SlurmWord | str | None:
        """Slurm's word on a job's end (:mod:`verdict`): ``scontrol show job -o`` while slurmctld keeps the
        job, else ``sacct`` where the cluster keeps accounting; None when neither knows it, a one-line reason
        when its lines cannot be trusted (``name``: the name the controller gave the job)."""
        from trials.controller.slurm import verdict

        done = self.call("scontrol", "show", "job", "-o", job_id)
        if done.returncode == 0:
            word = verdict.parse_scontrol_job(done.stdout.decode("utf-8", "replace"), job_id, name)
            if word is not None:
                return word
        elif "invalid job id" not in last_line(done.stderr).lower():
            raise BackendError(f"scontrol show job {job_id} failed: {last_line(done.stderr)}")
        return self._accounted(job_id)

    def _accounted(self, job_id: str) -> verdict.SlurmWord | None:
        """``sacct``'s word on a job slurmctld no longer keeps (None: no accounting, or it does not know it)."""
        if self.accounting is False:
            return None
        sacct = self.paths.get("sacct") or shutil.which("sacct", path=self.environ.get("PATH", os.defpath))
        if sacct is None:
            self.accounting = False
            return None
        self.paths["sacct"] = sacct
        done = self.call("sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode,NodeList")
        if done.returncode != 0:
            if "accounting storage is disabled" in done.stderr.decode("utf-8", "replace").lower():
                self.accounting = False  # asked once: this cluster keeps none
                return None
            raise BackendError(f"sacct -j {job_id} failed: {last_line(done.stderr)}")
        self.accounting = True
        from trials.controller.slurm import verdict

        return verdict.parse_sacct(done.stdout.decode("utf-8", "replace"), job_id)

    def cancel(self, job_id: str, sig: str | None = None) -> None:
        """``scancel`` the job (``sig``: only send that signal to its steps); a gone job is fine."""
        args = [f"--signal={sig}"] if sig else []
        done = self.call("scancel", *args, job_id)
        if done.returncode != 0 and "invalid job id" not in last_line(done.stderr).lower() \
                and "already completing" not in last_line(done.stderr).lower():
            raise BackendError(f"scancel {job_id} failed: {last_line(done.stderr)}")


JOB_ENV_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ")


def job_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a job is submitted in (and, by ``--export=ALL``, runs in): Slurm's own settings
    (``SLURM_*``, ``SBATCH_*``, ``SRUN_*``: the cluster, the user's defaults) and a few basics, nothing else
    of the controller's (no database URL or password reaches a node). ``--export=NONE`` would do the same
    but makes slurmd build a login environment: 0.85 s more for every job's start, measured here."""
    return {k: v for k, v in environ.items()
            if k in JOB_ENV_NAMES or k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}


# Slurm's own fields first, then the two a job's owner can set to anything (any trial's trainer: the same
# user), a "|" in them included: they cannot shift the state or the nodes
SQUEUE_FORMAT = "%i|%T|%N|%r|%j|%k"


def parse_squeue(text: str) -> list[JobRow]:
    """``SQUEUE_FORMAT`` lines; a heterogeneous job's components (``12+0``, ``12+1``) by its id 12."""
    rows = []
    for line in text.splitlines():
        parts = line.split("|", 4)
        if len(parts) != 5:
            continue
        job, state, nodes, reason, owned = parts
        name, _, comment = owned.rpartition("|")  # the controller's comments hold no "|"
        job_id = job.split("+", 1)[0]
        if not job_id.isdigit():
            continue  # an array task (12_3) or garbage: never ours
        rows.append(JobRow(job_id=job_id, name=name, comment=comment, state=state.split()[0] if state else "",
                           nodes=nodes, reason=reason))
    return rows


def job_state(rows: Iterable[JobRow]) -> dict[str, tuple[str, str]]:
    """Per job id: its state (one still running component keeps it running; else the worst end) and
    its nodes."""
    out: dict[str, tuple[str, str]] = {}
    for row in rows:
        state, nodes = out.get(row.job_id, ("", ""))
        merged = row.state if not state else merge_states([state, row.state])
        out[row.job_id] = (merged, ",".join(n for n in (nodes, row.nodes) if n))
    return out


def last_line(data: bytes) -> str:
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return printable(lines[-1].strip()[:300]) if lines else "no message"
