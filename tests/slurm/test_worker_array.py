"""`trials worker` under Slurm: a job array of workers on one PostgreSQL job, each with its gres GPU.

A real two-node cluster (``slurmkit``), a real database: ``sbatch --array=1-2 --gres=gpu:1`` starts one
worker per node; each hands its trials the GPU of its own allocation (``CUDA_VISIBLE_DEVICES`` as Slurm
set it), the two share the job's trials, and none runs twice.
"""

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

from jobkit import shared_folder

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "tests" / "postgres" / "pg_trainer.py"  # checkpoints, logs start/end with CUDA_VISIBLE_DEVICES


def write_spec(path, *, events, gate, points):
    """Trials of one replica asking for one GPU; each waits after its first epoch until ``gate`` exists."""
    values = ", ".join(f"{0.1 * (i + 1):.1f}" for i in range(points))
    args = json.dumps([f"--events={events}", "--epochs=3", "--sleep=0.1", f"--gate={gate}", "--gate-epoch=1"])
    path.write_text("\n".join([
        "studySpec:",
        "  metrics: [{metricId: score, goal: MAXIMIZE}]",
        f"  parameters: [{{parameterId: x, discreteValueSpec: {{values: [{values}]}}}}]",
        "  algorithm: GRID_SEARCH",
        f"maxTrialCount: {points}",
        "parallelTrialCount: 2",
        "trialJobSpec:",
        "  workerPoolSpecs:",
        "  - {machineSpec: {machineType: n1-standard-4, acceleratorType: NVIDIA_TESLA_T4, acceleratorCount: 1}, "
        f"replicaCount: 1, containerSpec: {{imageUri: local, command: [python, {json.dumps(str(TRAINER))}], "
        f"args: {args}}}}}",
    ]) + "\n")
    return path


def read_events(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(predicate, timeout_s, what, why=lambda: ""):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}: {why()}")


def create_job(tmp_path, pg_url, points=4):
    """The job in PostgreSQL, not run (the array's workers run it); its trainer's events and gate files."""
    from trials.controller.jobs import registry
    from trials.spec.load import load_spec

    job_id = "s" + uuid.uuid4().hex[:12]
    # the workers' trials are sandboxed host trials: the host copy-on-write but for the job's buckets
    side = shared_folder(tmp_path / "gcs")
    events, gate = side / "events.jsonl", side / "gate"
    spec = write_spec(tmp_path / "job.yaml", events=events, gate=gate, points=points)
    registry.create_job(load_spec(str(spec)), root=str(tmp_path / "jobs"), job_id=job_id, spec_path=str(spec),
                        storage=pg_url, base_output_dir=str(tmp_path / "outputs"), project_number=None,
                        local_command=None, cwd=str(tmp_path), gcs_root=str(tmp_path / "gcs"))
    return job_id, events, gate


def run_array(cluster, tmp_path, argv, env, events, gate):
    """Submit ``sbatch argv``, let two trials run at once, open the gate, wait for the array's end; returns
    the array's job id and ``scontrol show job`` of each task."""
    submitted = subprocess.run(["sbatch", "--parsable", *argv], env=env, capture_output=True, text=True,
                               timeout=30)
    assert submitted.returncode == 0, submitted.stderr
    slurm_job = submitted.stdout.strip().split(";")[0]

    def outputs():
        return " | ".join(f"{p.name}: {p.read_text(errors='replace')[-600:]}"
                          for p in sorted(tmp_path.glob("task-*.out")))

    def queued():
        return cluster.run("squeue", "-h", "-j", slurm_job, "-o", "%i %T", check=False).strip()

    def both_running():
        running = {e["trial"] for e in read_events(events) if e["event"] == "epoch"}
        assert len(running) >= 2 or queued(), f"the array ended before two trials ran at once: {outputs()}"
        return len(running) >= 2

    try:
        # both workers hold a trial at once (one GPU each: a worker runs one at a time), then they go on
        wait_for(both_running, 120, "two trials running at once, one per array task", outputs)
        gres = {t["ArrayTaskId"]: t.get("GRES") for t in show_job(cluster, slurm_job, "-d")}  # while they run
        gate.touch()
        wait_for(lambda: not queued(), 120, "the array to finish", lambda: queued() + " " + outputs())
    finally:
        cluster.run("scancel", slurm_job, check=False)
    tasks = show_job(cluster, slurm_job)
    assert sorted(t["ArrayTaskId"] for t in tasks) == ["1", "2"], tasks
    assert all(t["JobState"] == "COMPLETED" and t["ExitCode"] == "0:0" for t in tasks), (tasks, outputs())
    assert len({t["NodeList"] for t in tasks}) == 2  # one task a node (1 CPU each)
    gpus = {}
    for task, text in gres.items():  # gpu:1(IDX:0): the node's GPU index Slurm gave the task
        assert text and text.startswith("gpu:1(IDX:") and text.endswith(")"), gres
        gpus[task] = text[len("gpu:1(IDX:"):-1]
    return slurm_job, gpus


def show_job(cluster, slurm_job, *flags):
    """``scontrol show job`` of every task of the array: one {key: value} per task."""
    out = cluster.run("scontrol", *flags, "-o", "show", "job", slurm_job)
    return [dict(word.split("=", 1) for word in line.split() if "=" in word) for line in out.splitlines()
            if line.strip()]


def check_shared(tmp_path, pg_url, job_id, events, alloc, trial_dir):
    """Every trial SUCCEEDED once, both tasks ran some, each with its own allocation's GPU.

    ``alloc``: task -> (CUDA_VISIBLE_DEVICES, worker pid); ``trial_dir(task, trial id)``: that task's folder.
    """
    from trials.controller.jobs import registry

    for task, (gpus, _pid) in alloc.items():
        assert gpus != "unset" and gpus.isdigit(), f"task {task} got CUDA_VISIBLE_DEVICES={gpus} from --gres=gpu:1"
    h = registry.open_job(job_id, root=str(tmp_path / "jobs"), storage=pg_url)
    assert h.store.meta().state == "JOB_STATE_SUCCEEDED"
    trials = {str(t.number + 1): t for t in h.store.frozen_trials()}
    assert sorted(trials) == ["1", "2", "3", "4"]
    assert all(t.user_attrs["state"] == "SUCCEEDED" for t in trials.values())
    assert sorted(round(t.params["x"], 6) for t in trials.values()) == [0.1, 0.2, 0.3, 0.4]
    workers = {t.user_attrs["worker"] for t in trials.values()}  # host:pid, as each worker names itself
    task_of = {w: task for w in workers for task, (_gpus, pid) in alloc.items() if w.rsplit(":", 1)[1] == pid}
    ran_by = {tid: task_of.get(t.user_attrs["worker"]) for tid, t in trials.items()}
    assert set(ran_by.values()) == set(alloc), ({tid: t.user_attrs["worker"] for tid, t in trials.items()}, alloc)

    evs = read_events(events)
    starts = [e for e in evs if e["event"] == "start"]
    assert sorted(e["trial"] for e in starts) == ["1", "2", "3", "4"]  # no trial ran twice
    assert sorted(e["trial"] for e in evs if e["event"] == "end") == ["1", "2", "3", "4"]
    for tid, t in trials.items():
        assert not [a for a in t.user_attrs.get("attempts", []) if a.get("worker")], t.user_attrs["attempts"]
        task = ran_by[tid]
        gpus = alloc[task][0]
        env_json = json.loads((trial_dir(task, tid) / "env.json").read_text())
        assert env_json["workerpool0-0"]["CUDA_VISIBLE_DEVICES"] == gpus, (tid, task, env_json)
        assert next(e["gpus"] for e in starts if e["trial"] == tid) == gpus  # what the trainer saw
        assert not [o for o in alloc if o != task and trial_dir(o, tid).exists()]  # in its worker's folder only
    spans = {e["trial"]: [e["t"], None] for e in starts}
    for e in evs:
        if e["event"] == "end":
            spans[e["trial"]][1] = e["t"]
    for a in trials:  # one GPU a worker: its trials never overlap
        for b in trials:
            if a < b and ran_by[a] == ran_by[b]:
                (s1, e1), (s2, e2) = spans[a], spans[b]
                assert e1 <= s2 or e2 <= s1, (a, b, spans)


def nodes_env(slurm_env):
    """What the tasks get (sbatch exports the submitter's environment): this checkout's ``trials``."""
    env = {**slurm_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "PATH": os.pathsep.join([os.path.dirname(sys.executable), slurm_env.get("PATH", "/usr/bin:/bin")])}
    env.pop("CUDA_VISIBLE_DEVICES", None)  # what the tasks get is Slurm's alone
    return env


def test_a_job_array_of_workers_shares_the_job_and_hands_out_each_allocation_gpu(tmp_path, cluster, slurm_env,
                                                                                 pg_url):
    from trials.controller.jobs import registry

    job_id, events, gate = create_job(tmp_path, pg_url)
    # Each task notes its allocation and its pid (the worker's, after exec), then becomes the worker; its
    # trial folders are its own (--root jobs-N), the database is what the workers share.
    worker = shlex.join([sys.executable, "-m", "trials", "worker", job_id, "--storage", pg_url,
                         "--grace-period", "2"])
    wrap = ('echo "${CUDA_VISIBLE_DEVICES-unset} $$" > alloc-$SLURM_ARRAY_TASK_ID.txt && exec ' + worker
            + ' --root jobs-$SLURM_ARRAY_TASK_ID')
    _, gpus = run_array(cluster, tmp_path, ["--array=1-2", "--gres=gpu:1", "--cpus-per-task=1",
                                            "--job-name=trials-workers", f"--chdir={tmp_path}",
                                            f"--output={tmp_path}/task-%a.out", "--wrap", wrap],
                        nodes_env(slurm_env), events, gate)
    alloc = {k: tuple((tmp_path / f"alloc-{k}.txt").read_text().split()) for k in ("1", "2")}
    assert {k: a[0] for k, a in alloc.items()} == gpus  # what Slurm says it gave is what each task saw
    check_shared(tmp_path, pg_url, job_id, events, alloc,
                 lambda task, tid: Path(registry.job_dir_of(str(tmp_path / f"jobs-{task}"), job_id)) / tid)


EXAMPLE = REPO / "examples" / "slurm" / "worker-array.sbatch"


def test_the_example_worker_array_script_runs_as_written(tmp_path, cluster, slurm_env, pg_url):
    """examples/slurm/worker-array.sbatch itself, the URL from $TRIALS_DB_URL; only the sizes overridden."""
    from trials.controller.jobs import registry

    job_id, events, gate = create_job(tmp_path, pg_url)
    env = {**nodes_env(slurm_env), "TRIALS_DB_URL": pg_url, "TRIALS_WORKER_ROOT": str(tmp_path / "roots")}
    slurm_job, gpus = run_array(cluster, tmp_path, ["--array=1-2", "--cpus-per-task=1", "--mem=500", "--time=10",
                                                    f"--chdir={tmp_path}", f"--output={tmp_path}/task-%a.out",
                                                    str(EXAMPLE), job_id], env, events, gate)
    roots = {k: Path(registry.job_dir_of(str(tmp_path / "roots" / f"{slurm_job}-{k}"), job_id)) for k in ("1", "2")}
    h = registry.open_job(job_id, root=str(tmp_path / "jobs"), storage=pg_url)
    pids: dict[str, set[str]] = {}  # task -> the worker pids of the trials in its folder
    for t in h.store.frozen_trials():
        for task, root in roots.items():
            if (root / str(t.number + 1)).exists():
                pids.setdefault(task, set()).add(t.user_attrs["worker"].rsplit(":", 1)[1])
    assert sorted(pids) == ["1", "2"] and all(len(p) == 1 for p in pids.values()), pids
    alloc = {k: (gpus[k], next(iter(pids[k]))) for k in roots}
    check_shared(tmp_path, pg_url, job_id, events, alloc, lambda task, tid: roots[task] / tid)
