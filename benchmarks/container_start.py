"""Per-replica cost of a containerised replica (issue 26): the container backend's start of one replica,
until it exited and its container is gone, against a bare ``podman run --rm IMAGE`` of the same image
and arguments, interleaved in one process so machine noise hits both alike.

The backend's start is what the job loop pays: ``podman run`` with the replica's labels, mounts and
environment (the runtime's ``run`` client as the replica's process, its logs in the trial folder) until the client
has exited and been reaped. The goal: <= 1.10x the bare run.

Needs podman and an image (default ``localhost/trials-hypertune:1``, which ``.ci/containers.sh`` builds;
``--image`` another). Machine settings come from ``CONTAINERS_CONF`` / ``TRIALS_CONTAINER_ARGS``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from benchmarks import report

GOAL_RATIO = 1.10
IMAGE = os.environ.get("TRIALS_BENCH_IMAGE", "localhost/trials-hypertune:1")
# The replica: a Python start in the image that reports once through hypertune, as a short trial does.
ENTRYPOINT = ("python", "-c", "import hypertune; hypertune.HyperTune().report_hyperparameter_tuning_metric("
              "hyperparameter_metric_tag='m', metric_value=1.0, global_step=1)")


def run(*, quick: bool = False, out_dir: str | None = None) -> dict[str, Any]:
    from trials import protocol
    from trials.controller.backend.protocol import ReplicaStart
    from trials.controller.container import runtime as rt
    from trials.controller.container.backend import ContainerBackend

    if shutil.which("podman") is None:
        print("container part skipped: podman is not installed")
        return {"skipped": "no podman"}
    runtime = rt.find("podman")
    if not runtime.image_exists(IMAGE):
        print(f"container part skipped: no image {IMAGE} (bash .ci/containers.sh builds it)")
        return {"skipped": f"no image {IMAGE}"}
    repeats = 5 if quick else 21
    work = tempfile.mkdtemp(prefix="bench-container-")
    try:
        job = os.path.join(work, "job")
        backend = ContainerBackend(runtime=runtime, job_dir=job, gcs_root=os.path.join(job, "gcs"),
                                   gcs_endpoint=False)
        backend.open(lambda line: None)

        def through_backend(i: int) -> None:
            trial_dir = os.path.join(job, str(i))
            os.makedirs(trial_dir, exist_ok=True)
            env = {protocol.ENV_TRIAL_ID: str(i), protocol.ENV_JOB_ID: "bench", protocol.ENV_ATTEMPT: "0",
                   protocol.ENV_METRIC_FILE: os.path.join(trial_dir, protocol.HYPERTUNE_FILE)}
            replica = backend.start(ReplicaStart(
                argv=(), env=env, cwd=work, name="workerpool0-0", label="workerpool0-0", trial_dir=trial_dir,
                stdout_path=os.path.join(trial_dir, "out.log"), stderr_path=os.path.join(trial_dir, "err.log"),
                image=IMAGE, entrypoint=ENTRYPOINT, args=("--x=0.5",)))
            while replica.poll() is None:
                time.sleep(0.005)
            replica.close()

        bare_dir = os.path.join(work, "bare")
        os.makedirs(bare_dir)

        def bare(i: int) -> None:
            metric = os.path.join(bare_dir, f"{i}.metrics")
            runtime.call("run", "--rm", "--network", "host", "--volume", f"{bare_dir}:{bare_dir}",
                         "--env", f"{protocol.ENV_METRIC_FILE}={metric}", "--entrypoint", ENTRYPOINT[0], IMAGE,
                         *ENTRYPOINT[1:], "--x=0.5")

        ways = {"bare podman run --rm": bare, "container backend (labels, mounts, env, stop)": through_backend}
        times: dict[str, list[float]] = {label: [] for label in ways}
        for i in range(repeats + 2):
            for label, way in ways.items():
                t = time.perf_counter()
                way(i)
                if i >= 2:  # two warm-ups
                    times[label].append(time.perf_counter() - t)
        backend.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {label: statistics.median(v) * 1000 for label, v in times.items()}
    base, ours = med["bare podman run --rm"], med["container backend (labels, mounts, env, stop)"]
    ratio = ours / base
    data = {"quick": quick, "repeats": repeats, "image": IMAGE, "median_ms": med, "ratio": ratio,
            "goals": {f"container backend <= {GOAL_RATIO}x bare podman run": ratio <= GOAL_RATIO}}
    path = report.write_result("container", data, out_dir=out_dir)
    rows = [[label, value, min(times[label]) * 1000] for label, value in med.items()]
    print(report.table(f"Containerised replica start until gone: median of {repeats} interleaved runs",
                       ["start", "median ms", "min ms"], rows))
    print(f"container backend / bare podman run: x{ratio:.3f} ({report.verdict(ratio <= GOAL_RATIO)} <= {GOAL_RATIO})")
    print(f"results: {path}")
    return data
