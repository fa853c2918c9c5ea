"""The cluster examples' shape: the Kubernetes Indexed Job and the Slurm array each run a valid `trials worker`.

No cluster here: the manifest is read with pyyaml and its command parsed by trials' own argument parser,
as is the sbatch script's `trials worker` line (``tests/slurm/test_worker_array.py`` runs the script).
"""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from trials.cli.parser import build_parser
from trials.cli.run import _cmd_worker

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MANIFEST = EXAMPLES / "kubernetes" / "workers-indexed-job.yaml"
SBATCH = EXAMPLES / "slurm" / "worker-array.sbatch"


def parse_worker(argv):
    """``argv`` (after ``trials``) as the CLI parses it; it must be a ``trials worker`` invocation."""
    args = build_parser().parse_args(argv)  # a bad flag is SystemExit 2: the test fails
    assert args.command == "worker" and args.handler is _cmd_worker, argv
    return args


def the_job():
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    jobs = [d for d in docs if d.get("kind") == "Job"]
    assert len(jobs) == 1, [d.get("kind") for d in docs]
    return jobs[0]


def test_the_manifest_is_an_indexed_job_of_workers():
    job = the_job()
    assert job["apiVersion"] == "batch/v1"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert isinstance(spec["completions"], int) and isinstance(spec["parallelism"], int)
    assert 1 <= spec["parallelism"] <= spec["completions"]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
    exit_2 = [r for r in spec["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    assert exit_2 and exit_2[0]["onExitCodes"]["values"] == [2]  # bad input: no retry
    (container,) = pod["containers"]
    assert exit_2[0]["onExitCodes"]["containerName"] == container["name"]
    assert isinstance(container["resources"]["limits"]["nvidia.com/gpu"], int)
    assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1


def test_the_manifest_command_is_a_valid_worker_with_the_url_from_a_secret():
    job = the_job()
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    argv = [*container["command"], *container.get("args", [])]
    assert argv[0] == "trials"
    args = parse_worker(argv[1:])
    assert args.job == job["metadata"]["labels"]["trials/job"]
    assert args.storage == "$(TRIALS_STORAGE)"  # expanded by Kubernetes from the container's env
    assert "://" not in " ".join(argv)  # no URL, let alone a password, in the pod spec
    env = {e["name"]: e for e in container["env"]}
    ref = env["TRIALS_STORAGE"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] and ref["key"]
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == ref["name"]
    # every $(VAR) the command uses is defined in the container's env (else Kubernetes leaves it as is)
    used = set(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", " ".join(argv)))
    assert used and used <= set(env), (used, sorted(env))
    assert args.root and args.grace_period is not None
    assert pod["terminationGracePeriodSeconds"] > args.grace_period  # the kubelet's SIGKILL comes after


def sbatch_worker_line():
    lines = [line.strip() for line in SBATCH.read_text().splitlines()
             if not line.lstrip().startswith("#") and "trials worker" in line]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def test_the_sbatch_script_runs_one_valid_worker_without_a_url_on_its_lines():
    words = sbatch_worker_line()
    assert words[:2] == ["exec", "trials"]  # the batch step's process: --signal=B:TERM and scancel reach it
    args = parse_worker(words[2:])
    assert args.storage == "$DB" and args.root == "$ROOT" and args.job == "$JOB"
    text = SBATCH.read_text()
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if "://" in line]  # the URL comes from $TRIALS_DB_URL or a file
    directives = [line.split(None, 1)[1] for line in text.splitlines() if line.startswith("#SBATCH")]
    assert any(d.startswith("--array=") for d in directives)
    assert any(d.startswith("--gres=gpu:") for d in directives)
    # sbatch reads #SBATCH lines only above the first command
    first_code = next(i for i, line in enumerate(text.splitlines()) if line.strip() and not line.startswith("#"))
    assert all(i < first_code for i, line in enumerate(text.splitlines()) if line.startswith("#SBATCH"))


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_sbatch_script_is_valid_bash():
    done = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
