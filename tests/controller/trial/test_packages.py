"""A pythonPackageSpec's packageUris on the host runtime: pip-installed (real pip, a real venv) into the
job's own environment, once per job and package, never into the host's Python; a package that does not
install fails its trial with Vertex's words for a user-code error and pip's last lines."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from trials.controller.trial import packages

pytestmark = pytest.mark.integration  # real pip installs into real venvs (not the fast part)

ROOT = Path(__file__).resolve().parents[3]
TASK = """\
import argparse, hypertune
p = argparse.ArgumentParser()
p.add_argument("--x", type=float, required=True)
a = p.parse_args()
hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score", metric_value=a.x * 2,
                                                          global_step=1)
print("hostpkg ran from", __file__)
"""


def sdist(folder: Path, name: str = "hostpkg", setup_extra: str = "") -> Path:
    """A source distribution of a package ``name`` (its ``task`` module reports ``score = 2x``) that
    requires cloudml-hypertune (the trainer has it: installed offline, nothing downloaded)."""
    files = {
        "setup.py": f"from setuptools import setup\n{setup_extra}\nsetup(name={name!r}, version='0.1', "
                    f"packages=[{name!r}], install_requires=['cloudml-hypertune'])\n",
        f"{name}/__init__.py": "",
        f"{name}/task.py": TASK.replace("hostpkg", name),
    }
    out = folder / f"{name}-0.1.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-0.1/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def host_imports(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def test_packages_install_once_into_the_jobs_venv_not_the_hosts_python(tmp_path: Path) -> None:
    pkg = sdist(tmp_path)
    job_dir = tmp_path / "job"
    done = packages.install(str(job_dir), [str(pkg)], gcs_root=str(tmp_path / "gcs"), cwd=str(tmp_path))
    assert done.python and not done.error, done
    assert Path(done.python).is_relative_to(tmp_path / ".packages" / "job")
    ran = subprocess.run([done.python, "-m", "hostpkg.task", "--x=0.25"], capture_output=True, text=True,
                         env={**os.environ, "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "m")})
    assert ran.returncode == 0, ran.stderr  # the trainer's own packages (hypertune) beside the installed one
    assert f"hostpkg ran from {tmp_path}/.packages/job/" in ran.stdout
    assert not host_imports("hostpkg")  # the host's Python never got it
    (folder,) = [p for p in (tmp_path / ".packages" / "job").iterdir() if p.is_dir()]
    log = (folder / packages.PIP_LOG).stat().st_mtime_ns
    again = packages.install(str(job_dir), [str(pkg)], gcs_root=str(tmp_path / "gcs"), cwd=str(tmp_path))
    assert again == done and (folder / packages.PIP_LOG).stat().st_mtime_ns == log  # installed once


def test_concurrent_installs_of_one_package_install_it_once(tmp_path: Path) -> None:
    pkg = sdist(tmp_path)
    results: list[packages.Installed] = []

    def one() -> None:
        results.append(packages.install(str(tmp_path / "job"), [str(pkg)], gcs_root=str(tmp_path / "gcs"),
                                        cwd=str(tmp_path)))

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.python for r in results}) == 1 and all(r.python for r in results), results
    assert len([p for p in (tmp_path / ".packages" / "job").iterdir() if p.is_dir()]) == 1


def test_a_link_in_the_bucket_is_not_read_as_a_package(tmp_path: Path) -> None:
    gcs = tmp_path / "gcs"
    (gcs / "b").mkdir(parents=True)
    (gcs / "b" / "p.tar.gz").symlink_to(sdist(tmp_path))  # a trainer may plant one there
    done = packages.install(str(tmp_path / "job"), ["gs://b/p.tar.gz"], gcs_root=str(gcs), cwd=str(tmp_path))
    assert done.python is None and "could not be read" in done.error


def _spec(tmp_path: Path, uri: str, trials: int = 3) -> Path:
    body = {
        "studySpec": {"metrics": [{"metricId": "score", "goal": "MAXIMIZE"}],
                      "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0.1, "maxValue": 0.9}}]},
        "maxTrialCount": trials, "parallelTrialCount": 2, "maxFailedTrialCount": trials,
        "trialJobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                              "pythonPackageSpec": {"executorImageUri": "us-docker.pkg.dev/x/y:1",
                                                                    "packageUris": [uri],
                                                                    "pythonModule": uri.rsplit("/", 1)[-1][:-11]
                                                                    + ".task"}}]},
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(body))
    return path


def _sweep(tmp_path: Path, spec: Path, job_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trials", "sweep", str(spec), "--root", str(tmp_path / "jobs"),
                           "--job-id", job_id, "--gcs-root", str(tmp_path / "gcs")], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)


def _describe(tmp_path: Path, job_id: str, fmt: str = "json") -> dict:
    out = subprocess.run([sys.executable, "-m", "trials", "describe", job_id, "--root", str(tmp_path / "jobs"),
                          "--format", fmt], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_sweep_runs_a_python_package_from_the_jobs_bucket_on_the_host(tmp_path: Path) -> None:
    (tmp_path / "gcs" / "bucket").mkdir(parents=True)
    sdist(tmp_path / "gcs" / "bucket")
    run = _sweep(tmp_path, _spec(tmp_path, "gs://bucket/hostpkg-0.1.tar.gz"), "pkg")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "installing the pythonPackageSpec's packageUris" in run.stdout + run.stderr
    body = _describe(tmp_path, "pkg")
    for t in body["trials"]:
        x = t["parameters"][0]["value"]
        assert t["state"] == "SUCCEEDED" and t["finalMeasurement"]["metrics"][0]["value"] == pytest.approx(2 * x)
    logs = [(tmp_path / "jobs" / "pkg" / t["id"] / "workerpool0-0.stdout.log").read_text() for t in body["trials"]]
    assert all(f"hostpkg ran from {tmp_path}/jobs/.packages/pkg/" in log for log in logs), logs
    venvs = [p for p in (tmp_path / "jobs" / ".packages" / "pkg").iterdir() if p.is_dir()]
    assert len(venvs) == 1  # three trials, one install
    assert not host_imports("hostpkg")


def test_a_package_that_does_not_install_fails_its_trials_with_pips_last_lines(tmp_path: Path) -> None:
    (tmp_path / "gcs" / "bucket").mkdir(parents=True)
    sdist(tmp_path / "gcs" / "bucket", "brokenpkg", setup_extra="raise SystemExit('this package cannot build')")
    run = _sweep(tmp_path, _spec(tmp_path, "gs://bucket/brokenpkg-0.1.tar.gz", trials=2), "broken")
    assert run.returncode == 1, run.stdout + run.stderr
    body = _describe(tmp_path, "broken")
    for t in body["trials"]:
        assert t["state"] == "INFEASIBLE"
        assert t["infeasibleReason"] == ("The replica workerpool0-0 exited with a non-zero status of 1. "
                                         "Termination reason: Error.")
    local = _describe(tmp_path, "broken", "local-json")
    detail = "\n".join(local["trials"]["1"]["error_detail"]) if "trials" in local else json.dumps(local)
    assert "this package cannot build" in detail or "this package cannot build" in (
        tmp_path / "jobs" / "broken" / "1" / "workerpool0-0.stderr.log").read_text()
    assert not host_imports("brokenpkg")
