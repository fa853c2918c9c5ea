"""Every runtime call the container code makes puts ``--`` before its operands (a name or an image is never
read as an option). The runtime is a stand-in program that records its argv: no podman needed."""

from __future__ import annotations

import json
import os
import signal
import stat
import time

from trials.controller.backend.protocol import ReplicaStart
from trials.controller.container import runtime as rt
from trials.controller.container.backend import ContainerBackend
from trials.controller.container.preflight import check_images
from trials.spec.load import load_spec

IMAGE = "us-docker.pkg.dev/p/r/t:1"
# (subcommand words) -> what the first operand after `--` is: an image, or one of our names
OPERANDS = {("image", "inspect"): "image", ("run",): "image-or-name", ("kill",): "name", ("rm",): "name",
            ("network", "create"): "name", ("network", "rm"): "name", ("network", "inspect"): "name"}
NO_OPERANDS = {("ps",), ("network", "ls"), ("info",)}


def fake_runtime(tmp_path, name: str) -> tuple[rt.Runtime, object]:
    log = tmp_path / f"{name}.calls"
    log.mkdir()
    program = tmp_path / name
    # one file per call: calls run concurrently (a run beside a kill), and lines appended piecewise to one shared
    # file interleave under load
    program.write_text(
        "#!/bin/sh\n"
        f"out=$(mktemp {log}/call.XXXXXX)\n"
        "for a in \"$@\"; do printf '%s\\037' \"$a\"; done > \"$out\"\n"
        "case \"$1 $2\" in \"network inspect\") echo 10.99.0.1;; esac\n"
        "case \"$1\" in run) case \"$*\" in *--detach*|*/trials-probe*) exit 0;; esac; exec sleep 30;; esac\n"
        "exit 0\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return rt.Runtime(name=name, program=str(program)), log


def calls(log) -> list[list[str]]:
    return [f.read_text().split("\x1f")[:-1] for f in sorted(log.iterdir())]


def subcommand(argv: list[str]) -> tuple[str, ...]:
    return tuple(argv[:2]) if argv[0] in ("image", "network") else (argv[0],)


def drive(tmp_path, runtime: rt.Runtime) -> None:
    """A preflight, then a job of one one-replica trial and one two-replica trial, started, stopped, closed."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "studySpec": {"metrics": [{"metricId": "m", "goal": "MAXIMIZE"}],
                      "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}]},
        "maxTrialCount": 1, "parallelTrialCount": 1,
        "trialJobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                              "containerSpec": {"imageUri": IMAGE}}]}}))
    check_images(runtime, load_spec(str(spec)), {})
    backend = ContainerBackend(runtime=runtime, job_dir=str(tmp_path / "job"), gcs_root=str(tmp_path / "gcs"),
                               environ={"PATH": "/usr/bin"}, gcs_endpoint=False)
    backend.open(lambda line: None)
    replicas = []
    for trial, names in (("1", ["workerpool0-0"]), ("2", ["workerpool0-0", "workerpool1-0"])):
        cluster = {"cluster": {n.rsplit("-", 1)[0]: [f"{n}:2222"] for n in names}}
        for n in names:
            trial_dir = tmp_path / "job" / trial
            trial_dir.mkdir(parents=True, exist_ok=True)
            replicas.append(backend.start(ReplicaStart(
                argv=(), env={"CLOUD_ML_TRIAL_ID": trial, "TRIALS_ATTEMPT": "0", "CLUSTER_SPEC": json.dumps(cluster)},
                cwd=str(tmp_path), name=n, label=n, trial_dir=str(trial_dir), stdout_path=str(trial_dir / "o"),
                stderr_path=str(trial_dir / "e"), image=IMAGE, entrypoint=("python", "-m", "task"), args=("--x=1",))))
    for r in replicas:
        r.begin_stop(time.monotonic())  # `kill --signal 15 -- NAME` (the stand-in ignores it)
        os.killpg(r.client.pgid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while any(r.poll() is None for r in replicas) and time.monotonic() < deadline:
        time.sleep(0.05)
    backend.close()


def test_every_runtime_call_puts_its_operands_after_a_double_dash(tmp_path):
    for name in ("podman", "docker"):
        runtime, log = fake_runtime(tmp_path, name)
        work = tmp_path / f"{name}-work"
        work.mkdir()
        drive(work, runtime)
        seen = set()
        for argv in calls(log):
            sub = subcommand(argv)
            seen.add(sub)
            assert sub in OPERANDS or sub in NO_OPERANDS, f"an unlisted runtime call: {argv}"
            if sub in NO_OPERANDS:
                continue
            assert "--" in argv, f"{name}: no -- before the operands of {argv}"
            first = argv[argv.index("--") + 1]
            kind = OPERANDS[sub]
            assert (first == IMAGE) if kind == "image" else first.startswith("trials-") if kind == "name" \
                else first == IMAGE or first.startswith("trials-"), argv
        assert seen >= {("image", "inspect"), ("run",), ("kill",), ("rm",), ("network", "create"),
                        ("network", "inspect")}, seen
