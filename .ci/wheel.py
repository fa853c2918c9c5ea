"""CI: install what users install. Build the sdist and the wheel from the checkout, check them, install the wheel
(not editable) into a fresh venv outside the checkout, and from there run what a user runs.

    python .ci/wheel.py [--keep]

Fails (exit 1, the step named) when: a file of trials/ is missing from the wheel or the sdist; `twine check` finds
a problem; a module of trials cannot be imported from the installed wheel (a missing optional third-party part may
fail its import; a missing module of trials may not); the README's main job or a sweep of an argparse + hypertune
trainer does not end JOB_STATE_SUCCEEDED; `trials serve` does not answer; `trials check --help` or
`trials-run --help` fails. Needs `build` and `twine` (the `dist` extra) in the running Python; the fresh venv gets
its dependencies from the package index.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS: list[str] = []


def step(name: str) -> None:
    STEPS.append(name)
    print(f"wheel: {name}", flush=True)


def fail(message: str) -> None:
    print(f"wheel: FAILED at {STEPS[-1] if STEPS else 'start'}: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        fail(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def package_files() -> set[str]:
    """The files of trials/ that git tracks (what a commit holds), as paths under trials/."""
    listed = run(["git", "ls-files", "trials"], cwd=ROOT).stdout.split()
    return {f for f in listed if "__pycache__" not in f}


def build(out: Path) -> tuple[Path, Path]:
    step("build the sdist and the wheel from the checkout")
    run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)], cwd=ROOT,
        timeout=900)
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        fail(f"expected one wheel and one sdist in {out}, got {[p.name for p in out.iterdir()]}")
    return wheels[0], sdists[0]


def check_contents(wheel: Path, sdist: Path) -> None:
    step("every file of trials/ is in the wheel and in the sdist")
    wanted = package_files()
    with zipfile.ZipFile(wheel) as z:
        in_wheel = {n for n in z.namelist() if n.startswith("trials/")}
    with tarfile.open(sdist) as t:
        names = t.getnames()
    top = names[0].split("/")[0]
    in_sdist = {n[len(top) + 1:] for n in names if n.startswith(f"{top}/trials/")}
    for label, got in (("wheel", in_wheel), ("sdist", in_sdist)):
        missing = sorted(wanted - got)
        if missing:
            fail(f"{len(missing)} file(s) of trials/ missing from the {label}: {', '.join(missing[:20])}")
    for name in ("LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml"):
        if f"{top}/{name}" not in names:
            fail(f"{name} is missing from the sdist")
    with zipfile.ZipFile(wheel) as z:
        if not any(n.endswith(".dist-info/licenses/LICENSE") for n in z.namelist()):
            fail("the wheel carries no LICENSE")
    print(f"  {len(wanted)} files, all in both", flush=True)


def twine_check(wheel: Path, sdist: Path) -> None:
    step("twine check --strict on both artifacts")
    run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)], cwd=ROOT)


def venv_with(wheel: Path, where: Path) -> Path:
    step("install the wheel (not editable) into a fresh venv outside the checkout")
    run([sys.executable, "-m", "venv", str(where)], cwd=where.parent)
    python = where / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         f"{wheel}[examples]"], cwd=where.parent, timeout=900)
    located = run([str(python), "-c", "import trials; print(trials.__file__)"], cwd=where.parent).stdout.strip()
    if not located.startswith(str(where)):
        fail(f"trials was imported from {located}, not from the fresh venv")
    return python


IMPORT_ALL = """
import importlib, json, pkgutil, sys
import trials
scripts = {"trials.__main__", "trials.cli.__main__"}
ok, optional = [], {}
for info in pkgutil.walk_packages(trials.__path__, "trials."):
    if info.name in scripts:
        continue
    try:
        importlib.import_module(info.name)
        ok.append(info.name)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] == "trials":
            print(f"{info.name}: {err}", file=sys.stderr)
            sys.exit(1)
        optional[info.name] = err.name
print(json.dumps({"ok": len(ok), "optional": optional}))
"""


def import_everything(python: Path, cwd: Path) -> None:
    step("import every module of the installed package")
    out = json.loads(run([str(python), "-c", IMPORT_ALL], cwd=cwd).stdout.strip().splitlines()[-1])
    print(f"  {out['ok']} modules imported; missing optional parts: {out['optional'] or 'none'}", flush=True)


def job_state(bin_dir: Path, cwd: Path, job: str, env: dict[str, str]) -> str:
    described = run([str(bin_dir / "trials"), "describe", job, "--format", "json"], cwd=cwd, env=env)
    state: str = json.loads(described.stdout)["state"]
    return state


def sweeps(bin_dir: Path, project: Path, env: dict[str, str]) -> None:
    step("the README's main job (digits, 12 trials, median stopping) from the installed wheel")
    shutil.copytree(ROOT / "search_spaces", project / "search_spaces")
    shutil.copytree(ROOT / "examples", project / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    run([str(bin_dir / "trials"), "sweep", "search_spaces/digits_mlp.yaml", "--job-id", "digits", "--quiet"],
        cwd=project, env=env, timeout=900)
    if (state := job_state(bin_dir, project, "digits", env)) != "JOB_STATE_SUCCEEDED":
        fail(f"the digits job ended {state}")
    step("a sweep of an argparse + hypertune trainer (3 trials)")
    run([str(bin_dir / "trials"), "sweep", "examples/argparse_hypertune/config.yaml", "--job-id", "argparse",
         "--max-trial-count", "3", "--quiet", "--", "python", "examples/argparse_hypertune/train.py"],
        cwd=project, env=env, timeout=600)
    if (state := job_state(bin_dir, project, "argparse", env)) != "JOB_STATE_SUCCEEDED":
        fail(f"the argparse + hypertune job ended {state}")


def serve(bin_dir: Path, project: Path, env: dict[str, str]) -> None:
    step("trials serve answers a request")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "wheel-check-token"
    proc = subprocess.Popen([str(bin_dir / "trials"), "serve", "--port", str(port), "--root", "served"],
                            cwd=project, env={**env, "TRIALS_SERVE_TOKEN": token}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/v1/projects/p/locations/us-central1/hyperparameterTuningJobs"
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    body = json.loads(answer.read())
                break
            except OSError as err:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read() if proc.poll() is not None and proc.stdout else ""
                    fail(f"no answer from trials serve on port {port}: {err}\n{out[-3000:]}")
                time.sleep(0.2)
        if not isinstance(body, dict):
            fail(f"trials serve answered {body!r}")
        print(f"  GET hyperparameterTuningJobs: 200 {json.dumps(body)[:80]}", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def missing_parts(bin_dir: Path, project: Path, env: dict[str, str]) -> None:
    step("a missing optional part is one line naming what to install, exit 2")
    bare = project / "no-tools"  # a PATH with Python but neither podman nor Slurm's commands
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    cases = [(["--sampler", "cmaes"], env, "trials[cmaes]"), (["--sampler", "vizier"], env, "trials[vizier]"),
             (["--sampler", "gp"], env, "trials[gp]"),
             (["--runtime", "podman"], {**env, "PATH": f"{bin_dir}{os.pathsep}{bare}"}, "podman"),
             (["--runtime", "slurm"], {**env, "PATH": f"{bin_dir}{os.pathsep}{bare}"}, "slurm")]
    for n, (options, case_env, named) in enumerate(cases):
        done = run([str(bin_dir / "trials"), "sweep", "examples/argparse_hypertune/config.yaml", "--job-id",
                    f"missing-{n}", *options, "--quiet", "--", "python", "examples/argparse_hypertune/train.py"],
                   cwd=project, env=case_env, check=False)
        lines = done.stderr.strip().splitlines()
        if done.returncode != 2 or len(lines) != 1 or named not in lines[0] or "Traceback" in done.stderr:
            fail(f"{' '.join(options)} without its part: exit {done.returncode}, stderr {done.stderr[-2000:]!r}")
        print(f"  {' '.join(options)}: {lines[0]}", flush=True)
    done = run([str(bin_dir / "trials"), "report", "digits"], cwd=project, env=env, check=False)  # no matplotlib
    if done.returncode != 2 or len(done.stderr.strip().splitlines()) != 1 or "trials[report]" not in done.stderr:
        fail(f"trials report without matplotlib: exit {done.returncode}, stderr {done.stderr[-2000:]!r}")
    print(f"  report: {done.stderr.strip()}", flush=True)


def helps(bin_dir: Path, cwd: Path, env: dict[str, str]) -> None:
    step("trials --version, trials check --help, trials-run --help")
    version = run([str(bin_dir / "trials"), "--version"], cwd=cwd, env=env).stdout.strip()
    print(f"  {version}", flush=True)
    run([str(bin_dir / "trials"), "check", "--help"], cwd=cwd, env=env)
    run([str(bin_dir / "trials-run"), "--help"], cwd=cwd, env=env)


def main() -> int:
    keep = "--keep" in sys.argv[1:]
    scratch = Path(tempfile.mkdtemp(prefix="trials-wheel-"))  # outside the checkout
    began = time.monotonic()
    try:
        wheel, sdist = build(scratch / "dist")
        check_contents(wheel, sdist)
        twine_check(wheel, sdist)
        python = venv_with(wheel, scratch / "venv")
        bin_dir = python.parent
        project = scratch / "project"
        project.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        import_everything(python, project)
        helps(bin_dir, project, env)
        sweeps(bin_dir, project, env)
        missing_parts(bin_dir, project, env)
        serve(bin_dir, project, env)
    finally:
        if keep:
            print(f"wheel: kept {scratch}", flush=True)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"wheel: all {len(STEPS)} steps passed in {time.monotonic() - began:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
