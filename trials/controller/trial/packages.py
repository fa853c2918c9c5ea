"""A ``pythonPackageSpec`` pool's ``packageUris`` on the host runtime: pip-installed with their
dependencies, as Vertex's prebuilt images install them, into an environment of the job's own that the
replica's ``python`` then is.

The environment is a venv made from the trainer's interpreter (the controller's, which ``python`` means
locally) with the interpreter's own site folders on its path (a ``.pth`` file: a venv's
``--system-site-packages`` would reach only the base installation's), so what the trainer already has
satisfies the packages' requirements and only what is missing is installed. pip installs into the venv
only: it never uninstalls or changes a package outside it ("outside environment").

It lives beside the job folder, ``ROOT/.packages/JOB/<key>/`` (a host trial's view hides the job folder
but for its own trial folder, and sees the rest of the host copy-on-write or read-only: a trainer can
use the venv, never change it for the next trial or for the controller's next install), the key a hash
of the interpreter and of each package's bytes: a 40-trial job installs once, a resumed one not again, a
changed package anew. The packages are
read once, beneath the bucket folder without following a link (``gs://``: a trainer writes that folder)
or as regular files, and copied beside the venv: pip installs the bytes that were hashed. Installs of
one key are serialized by a lock file (several controllers of one job folder), and a venv is used only
once its ``installed`` mark is written. The install runs on the controller's side before the replica
starts (a host trial sees the file system copy-on-write: what it installed would go with it).

A package that does not install fails the replica as the prebuilt image's would: the replica runs a
command that prints pip's last lines to its stderr and exits 1, so the trial fails with Vertex's words
for a user-code error and those lines as its detail.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trials import files, protocol
from trials.controller.backend.protocol import ReplicaBackend, ReplicaHandle, ReplicaStart
from trials.controller.gcs.beneath import Refused, Store

PACKAGES_DIR = ".packages"  # beside the job folders: ROOT/.packages/JOB/
INSTALLED_MARK = "installed"
PIP_LOG = "pip.log"
PIP_TAIL_LINES = 20  # what a failed install shows of pip's output
PIP_TIMEOUT_S = 1800.0
# What a replica whose packages did not install runs: pip's last lines to stderr, exit 1 (an argument
# each, so a trainer's file name printed by pip is never a word of a command)
_FAILED = "import sys; sys.stderr.write(sys.argv[1]); sys.stderr.flush(); sys.exit(1)"


@dataclass(frozen=True, slots=True)
class Installed:
    """Where a set of packages is installed: the venv's interpreter, or why not (``error``: pip's last lines)."""

    python: str | None
    error: str = ""


def read_package(uri: str, *, gcs_root: str, cwd: str) -> bytes:
    """The bytes of one ``packageUris`` entry: ``gs://BUCKET/x`` beneath the bucket folder (never
    through a link, never a FIFO), a local path (relative to ``cwd``) as a regular file.

    Raises:
        OSError: missing, a link, not a regular file.
    """
    if protocol.is_gcs_uri(uri):
        rel = uri[len("gs://"):]
        store = Store(gcs_root)
        try:
            return store.read_bytes(rel)
        finally:
            store.close()
    path = uri if os.path.isabs(uri) else os.path.join(cwd, uri)
    fd = files.open_regular(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def package_name(uri: str) -> str:
    """The file name pip sees for ``uri`` (its last component: pip reads the kind from it)."""
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    return name if name not in ("", ".", "..") else "package"


def env_key(python: str, version: str, contents: Sequence[tuple[str, bytes]]) -> str:
    """The key of an environment: the interpreter and every package (name and bytes), in order (pure)."""
    h = hashlib.sha256()
    for part in (python, version):
        h.update(part.encode() + b"\0")
    for name, data in contents:
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:32]


def pip_command(venv_python: str, paths: Sequence[str], *, isolated_builds: bool) -> list[str]:
    """pip in the venv: the packages with their dependencies; without a build environment of its own
    when the trainer has setuptools (an sdist then builds offline, with what the trainer has)."""
    return [venv_python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
            "--no-warn-script-location", *(() if isolated_builds else ("--no-build-isolation",)), *paths]


def site_folders() -> list[str]:
    """The trainer's interpreter's site folders (this process's: locally ``python`` is it), in order."""
    import site

    out = [p for p in site.getsitepackages() if os.path.isdir(p)]
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        out.append(site.getusersitepackages())
    return list(dict.fromkeys(out))


def packages_dir(job_dir: str) -> str:
    """Where a job's environments are: ``ROOT/.packages/JOB`` for the job folder ``ROOT/JOB``."""
    job_dir = os.path.abspath(job_dir)
    return os.path.join(os.path.dirname(job_dir), PACKAGES_DIR, os.path.basename(job_dir))


def install(job_dir: str, uris: Sequence[str], *, gcs_root: str, cwd: str, python: str = sys.executable,
            environ: Mapping[str, str] | None = None) -> Installed:
    """Install ``uris`` (once per key, see the module) and return the venv's interpreter, or pip's last
    lines when they do not install (or cannot be read)."""
    try:
        contents = [(package_name(u), read_package(u, gcs_root=gcs_root, cwd=cwd)) for u in uris]
    except (OSError, Refused) as err:
        where = getattr(err, "filename", None) or ""
        return Installed(None, f"the package {where} could not be read: {err.strerror or err}\n")
    key = env_key(python, sys.version, contents)
    top = packages_dir(job_dir)
    os.makedirs(top, exist_ok=True)
    folder = os.path.join(top, key)
    venv_python = os.path.join(folder, "venv", "bin", "python")
    with _locked(os.path.join(top, key + ".lock")):
        if os.path.isfile(os.path.join(folder, INSTALLED_MARK)):
            return Installed(venv_python)
        shutil.rmtree(folder, ignore_errors=True)  # a partial one (its controller died installing)
        os.makedirs(folder)
        paths = []
        for k, (name, data) in enumerate(contents):
            os.makedirs(os.path.join(folder, "src", str(k)))
            path = os.path.join(folder, "src", str(k), name)
            files.write_atomic(path, data)
            paths.append(path)
        env = {k: v for k, v in (os.environ if environ is None else environ).items()
               if k not in ("PYTHONHOME", "VIRTUAL_ENV", "PIP_TARGET", "PIP_PREFIX", "PIP_USER")}
        log_path = os.path.join(folder, PIP_LOG)
        with open(log_path, "wb") as log:
            made = subprocess.run([python, "-m", "venv", "--without-pip", os.path.join(folder, "venv")],
                                  stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
            if made.returncode == 0:
                _layer(venv_python, env)
                isolated = importlib.util.find_spec("setuptools") is None
                try:
                    made = subprocess.run(pip_command(venv_python, paths, isolated_builds=isolated), stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                          timeout=PIP_TIMEOUT_S, check=False, cwd=folder)
                except subprocess.TimeoutExpired:
                    log.write(f"\npip did not end in {PIP_TIMEOUT_S:g}s\n".encode())
                    return Installed(None, _tail(log_path))
        if made.returncode != 0:
            return Installed(None, _tail(log_path))
        files.write_atomic(os.path.join(folder, INSTALLED_MARK), b"")
        return Installed(venv_python)


def _layer(venv_python: str, env: Mapping[str, str]) -> None:
    """Put the trainer's site folders on the venv's path (after its own), through a ``.pth`` file."""
    out = subprocess.run([venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, env=dict(env), check=True)
    purelib = out.stdout.strip()
    files.write_atomic(os.path.join(purelib, "_trials_trainer_site.pth"),
                       "".join(p + "\n" for p in site_folders()).encode())


def _tail(path: str) -> str:
    data = files.read_regular(path, max_bytes=1 << 20, offset=max(0, os.path.getsize(path) - (1 << 20)))
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "".join(line + "\n" for line in lines[-PIP_TAIL_LINES:])


@contextlib.contextmanager
def _locked(path: str) -> Any:
    fd = files.open_regular(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def failed_argv(error: str) -> tuple[str, ...]:
    """The command of a replica whose packages did not install: ``error`` to stderr, exit 1."""
    return (sys.executable, "-c", _FAILED, "ERROR: the pythonPackageSpec's packageUris did not install:\n" + error)


class PackagesBackend:
    """The host backend, with each ``pythonPackageSpec`` replica's packages installed before it starts
    (``open`` installs the job's, once; a start reuses them) and its ``python`` the venv's."""

    def __init__(self, inner: ReplicaBackend, *, job_dir: str, gcs_root: str, cwd: str,
                 package_sets: Iterable[Sequence[str]] = ()):
        self.inner = inner
        self.job_dir = job_dir
        self.gcs_root = gcs_root
        self.cwd = cwd
        self._sets = [tuple(s) for s in package_sets if s]
        self._done: dict[tuple[str, ...], Installed] = {}

    def _installed(self, uris: tuple[str, ...], say: Callable[[str], None] | None = None) -> Installed:
        if uris not in self._done:
            if say is not None:
                say(f"installing the pythonPackageSpec's packageUris ({', '.join(uris)}) with pip, once for the job")
            self._done[uris] = install(self.job_dir, uris, gcs_root=self.gcs_root, cwd=self.cwd)
        return self._done[uris]

    def open(self, say: Callable[[str], None]) -> None:
        self.inner.open(say)
        for uris in self._sets:  # before any trial: the loop is not held by pip while trials run
            self._installed(uris, say)

    def start(self, request: ReplicaStart) -> ReplicaHandle:
        uris = tuple(request.package_uris)
        if not uris or not request.argv or request.argv[0] != sys.executable:
            return self.inner.start(request)  # (a command given after --: the user's own environment)
        done = self._installed(uris)
        argv = (done.python, *request.argv[1:]) if done.python else failed_argv(done.error)
        return self.inner.start(replace(request, argv=tuple(argv)))

    def check_memory(self) -> None:
        self.inner.check_memory()

    def close(self) -> None:
        self.inner.close()
