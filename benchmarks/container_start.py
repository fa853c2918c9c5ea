"""Per-replica cost of a containerised replica (issues 26 and 46): the container backend's start of one replica,
until it exited and its container is gone, against a bare ``podman run --rm IMAGE`` of the same image
and arguments, interleaved in one process so machine noise hits both alike.

The backend's start is what the job loop pays: ``podman run`` with the replica's labels, mounts and
environment (the runtime's ``run`` client as the replica's process, its logs in the trial folder) until the client
has exited and been reaped. The goal: <= 1.10x the bare run (which shares the host's network).

Since issue 46 every trial runs on a network of its own; a one-replica trial joins the namespace its
network's keeper holds. Two more lanes, the same backend arguments with only the network changed, show
what that costs: on the host's network (the backend before issue 46) and attached to a bridge network
itself (the fallback without catatonit). A trial network is made once and reused by the next trial:
its making (``network create``, the keeper, the storage endpoint on its gateway) is timed apart.

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


BARE = "bare podman run --rm (host network)"
OURS = "container backend, own network (keeper's namespace)"
HOST = "container backend args, host network (before)"
ATTACHED = "container backend args, attached to a bridge network"


def run(*, quick: bool = False, out_dir: str | None = None) -> dict[str, Any]:
    from trials import protocol
    from trials.controller.backend.protocol import ReplicaStart
    from trials.controller.container import runtime as rt
    from trials.controller.container.backend import ContainerBackend
    from trials.controller.container.network import TrialNetworks
    from trials.controller.gcs import emulator as gcs_emulator
    from trials.controller.process.spawn import start_replica

    if shutil.which("podman") is None:
        print("container part skipped: podman is not installed")
        return {"skipped": "no podman"}
    runtime = rt.find("podman")
    if not runtime.image_exists(IMAGE):
        print(f"container part skipped: no image {IMAGE} (bash .ci/containers.sh builds it)")
        return {"skipped": f"no image {IMAGE}"}
    repeats = 5 if quick else 21
    work = tempfile.mkdtemp(prefix="bench-container-")
    attached_net = f"trials-bench-{os.getpid()}-attached"
    try:
        job = os.path.join(work, "job")
        backend = ContainerBackend(runtime=runtime, job_dir=job, gcs_root=os.path.join(job, "gcs"),
                                   gcs_endpoint=False)
        backend.open(lambda line: None)
        runtime.call("network", "create", "--", attached_net)

        def request(i: int, lane: str) -> ReplicaStart:
            trial_dir = os.path.join(job, f"{lane}{i}")
            os.makedirs(trial_dir, exist_ok=True)
            env = {protocol.ENV_TRIAL_ID: str(i), protocol.ENV_JOB_ID: "bench", protocol.ENV_ATTEMPT: "0",
                   protocol.ENV_METRIC_FILE: os.path.join(trial_dir, protocol.HYPERTUNE_FILE)}
            return ReplicaStart(
                argv=(), env=env, cwd=work, name="workerpool0-0", label="workerpool0-0", trial_dir=trial_dir,
                stdout_path=os.path.join(trial_dir, "out.log"), stderr_path=os.path.join(trial_dir, "err.log"),
                image=IMAGE, entrypoint=ENTRYPOINT, args=("--x=0.5",))

        def wait(replica: Any, stderr_path: str) -> None:
            while (ended := replica.poll()) is None:
                time.sleep(0.005)
            replica.close()
            if ended.status != 0:  # a start that failed is no start to time (say, a runtime setting missing)
                with open(stderr_path, encoding="utf-8", errors="replace") as f:
                    said = f.read()[-2000:]
                raise RuntimeError(f"a replica exited {ended.status}: "
                                   f"{runtime.fix_for(said) or (said.strip().splitlines() or [''])[-1]}")

        def through_backend(i: int) -> None:
            req = request(i, "own")
            wait(backend.start(req), req.stderr_path)

        def with_network(lane: str, network: list[str]) -> Any:
            def start(i: int) -> None:
                req = request(i, lane)
                args = backend.run_args(req, f"trials-bench-{lane}-{i}")
                args[args.index("--network=none")] = network[0]
                args[args.index(network[0]) + 1:args.index(network[0]) + 1] = network[1:]
                wait(start_replica([*runtime.command, *args], env=backend.environ, cwd=job,
                                   stdout_path=req.stdout_path, stderr_path=req.stderr_path, name=req.label),
                     req.stderr_path)
            return start

        bare_dir = os.path.join(work, "bare")
        os.makedirs(bare_dir)

        def bare(i: int) -> None:
            metric = os.path.join(bare_dir, f"{i}.metrics")
            done = runtime.call("run", "--rm", "--network", "host", "--volume", f"{bare_dir}:{bare_dir}",
                                "--env", f"{protocol.ENV_METRIC_FILE}={metric}", "--entrypoint", ENTRYPOINT[0], "--",
                                IMAGE, *ENTRYPOINT[1:], "--x=0.5")
            if done.returncode != 0:
                fix = runtime.fix_for(done.stderr.decode(errors="replace"))
                raise RuntimeError(f"bare podman run exited {done.returncode}: "
                                   f"{fix or done.stderr.decode(errors='replace').strip()[-300:]}")

        ways = {BARE: bare, OURS: through_backend, HOST: with_network("host", ["--network=host"]),
                ATTACHED: with_network("attached", [f"--network={attached_net}", "--network-alias=workerpool0-0",
                                                    "--hostname=workerpool0-0"])}
        times: dict[str, list[float]] = {label: [] for label in ways}
        for i in range(repeats + 2):
            for label, way in ways.items():
                t = time.perf_counter()
                way(i)
                if i >= 2:  # two warm-ups
                    times[label].append(time.perf_counter() - t)
        backend.close()
        making = network_making(runtime, job, TrialNetworks, gcs_emulator.available(), 3 if quick else 7)
    finally:
        runtime.call("network", "rm", "--force", "--", attached_net)
        shutil.rmtree(work, ignore_errors=True)
    med = {label: statistics.median(v) * 1000 for label, v in times.items()}
    ratio = med[OURS] / med[BARE]
    data = {"quick": quick, "repeats": repeats, "image": IMAGE, "median_ms": med, "ratio": ratio,
            "ratio_before": med[HOST] / med[BARE], "ratio_attached": med[ATTACHED] / med[BARE],
            "network_making_ms": making,
            "goals": {f"container backend <= {GOAL_RATIO}x bare podman run": ratio <= GOAL_RATIO}}
    path = report.write_result("container", data, out_dir=out_dir)
    rows = [[label, value, min(times[label]) * 1000] for label, value in med.items()]
    print(report.table(f"Containerised replica start until gone: median of {repeats} interleaved runs",
                       ["start", "median ms", "min ms"], rows))
    print(report.table("A trial network made (once, reused by the next trials): median ms",
                       ["step", "median ms"], [[k, v] for k, v in making.items()]))
    print(f"container backend / bare podman run: x{ratio:.3f} ({report.verdict(ratio <= GOAL_RATIO)} <= {GOAL_RATIO}); "
          f"before (host network) x{data['ratio_before']:.3f}; attached to a bridge x{data['ratio_attached']:.3f}")
    print(f"results: {path}")
    return data


def network_making(runtime: Any, job: str, networks: Any, endpoint: bool, n: int) -> dict[str, float]:
    """Median ms to make a trial network (create, gateway, keeper; with the storage endpoint when the gcs extra is
    installed) and to remove it."""
    made: dict[str, list[float]] = {"make (network, keeper)": [], "remove": []}
    if endpoint:
        made["make (network, keeper, storage endpoint)"] = []
    for i in range(n):
        for label in [k for k in made if k.startswith("make")]:
            nets = networks(runtime, job_dir=job, me=f"bench:{os.getpid()}:{i}", environ=dict(os.environ),
                            gcs_root=job if "endpoint" in label else None)
            t = time.perf_counter()
            nets.take(f"t{i}", IMAGE)
            made[label].append(time.perf_counter() - t)
            t = time.perf_counter()
            nets.close()
            made["remove"].append(time.perf_counter() - t)
    return {label: statistics.median(v) * 1000 for label, v in made.items()}
