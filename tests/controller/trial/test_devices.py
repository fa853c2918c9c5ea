"""The GPU allocator and device plan, with fake device lists; the CLI's no-GPU and CPU paths."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from jobkit import shared_folder

from trials.controller.trial import devices
from trials.controller.trial.devices import (
    DeviceAllocator,
    DevicePlan,
    parse_cuda_visible_devices,
    parse_gpus_flag,
    parse_nvidia_smi,
    plan,
    replica_env,
)
from trials.errors import ConfigError
from trials.spec import MachineSpec

SMI = """GPU 0: Tesla T4 (UUID: GPU-aaaa)
GPU 1: Tesla T4 (UUID: GPU-bbbb)
GPU 2: NVIDIA A100-SXM4-40GB (UUID: GPU-cccc)
  MIG 1g.5gb Device 0: (UUID: MIG-dddd)
"""


def job_with(*pools):
    from trials.spec.load import parse_spec

    x = {"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
            "containerSpec": {"imageUri": "x", "command": ["true"]}}
    base = parse_spec({"studySpec": {"metrics": [{"metricId": "m", "goal": "MAXIMIZE"}], "parameters": [x]},
                       "maxTrialCount": 1, "parallelTrialCount": 1,
                       "trialJobSpec": {"workerPoolSpecs": [pool]}},
                      source="<test>")
    template = base.trial_job.worker_pools[0]
    built = tuple(replace(template, replica_count=n, machine_spec=MachineSpec(
                      machine_type="n1-standard-4", accelerator_type="NVIDIA_TESLA_T4" if g else None,
                      accelerator_count=g))
                  for n, g in pools)
    return replace(base, trial_job=replace(base.trial_job, worker_pools=built))


def test_parse_nvidia_smi_takes_gpu_indexes_only():
    assert parse_nvidia_smi(SMI) == ("0", "1", "2")
    assert parse_nvidia_smi("") == ()
    assert parse_nvidia_smi("No devices were found") == ()


def test_detect_gpus_without_nvidia_smi_or_when_it_fails():
    def missing(*a, **k):
        raise FileNotFoundError("nvidia-smi")

    assert devices.detect_gpus(run=missing) == ()
    def failed(*a, **k):
        return subprocess.CompletedProcess(a, 9, stdout="", stderr="NVIDIA-SMI has failed")
    assert devices.detect_gpus(run=failed) == ()
    def ok(*a, **k):
        return subprocess.CompletedProcess(a, 0, stdout=SMI, stderr="")
    assert devices.detect_gpus(run=ok) == ("0", "1", "2")


def test_gpus_flag():
    assert parse_gpus_flag("0,1, 3") == ("0", "1", "3")
    assert parse_gpus_flag("") == ()
    with pytest.raises(ConfigError, match="each device once"):
        parse_gpus_flag("0,0")


def test_allocator_never_shares_a_device_and_is_all_or_nothing():
    a = DeviceAllocator(("0", "1", "2", "3"))
    assert a.allocate("1", (2,)) == (("0", "1"),)
    assert a.allocate("2", (1, 1)) == (("2",), ("3",))
    assert a.allocate("3", (1,)) is None and a.free == ()
    a.release("1")
    assert a.free == ("0", "1")
    assert a.allocate("3", (1, 2)) is None  # needs 3, only 2 free: nothing taken
    assert a.free == ("0", "1")
    assert a.allocate("3", (1, 0, 1)) == (("0",), (), ("1",))
    held = [d for groups in a.held.values() for g in groups for d in g]
    assert len(held) == len(set(held)) == 4
    with pytest.raises(ValueError, match="already holds"):
        a.allocate("3", (0,))


def test_allocator_random_sequences_keep_devices_exclusive():
    import random

    rng = random.Random(7)
    a = DeviceAllocator(tuple(str(i) for i in range(5)))
    live = {}
    for step in range(500):
        if live and rng.random() < 0.4:
            owner = rng.choice(sorted(live))
            a.release(owner)
            del live[owner]
        else:
            counts = tuple(rng.randint(0, 2) for _ in range(rng.randint(1, 3)))
            got = a.allocate(f"t{step}", counts)
            assert (got is None) == (sum(counts) > 5 - sum(sum(map(len, g)) for g in live.values()))
            if got is not None:
                assert tuple(map(len, got)) == counts
                live[f"t{step}"] = got
        used = [d for g in live.values() for grp in g for d in grp]
        assert len(used) == len(set(used)) and set(a.free).isdisjoint(used)


def test_plan_no_gpu_machine_says_so_in_one_line():
    job = job_with((1, 1), (2, 1))
    with pytest.raises(ConfigError) as err:
        plan(job, gpus=None, ignore_accelerators=False, detect=lambda: (), environ={})
    msg = str(err.value)
    assert "\n" not in msg and "3 accelerator(s) per trial" in msg and "no GPU" in msg
    assert "--ignore-accelerators" in msg and "nvidia-smi" in msg
    assert err.value.exit_code == 2


def test_plan_too_few_gpus_names_the_flag():
    with pytest.raises(ConfigError, match=r"2 GPU\(s\) \(0, 1\) from --gpus"):
        plan(job_with((1, 3)), gpus="0,1", ignore_accelerators=False)


def test_plan_counts_per_replica_and_cpu_fallback():
    job = job_with((1, 2), (2, 1))
    p = plan(job, gpus="0,1,2,3,4", ignore_accelerators=False)
    assert p == DevicePlan(devices=("0", "1", "2", "3", "4"), counts=(2, 1, 1), hide=False)
    assert p.per_trial == 4
    cpu = plan(job, gpus=None, ignore_accelerators=True, detect=lambda: (), environ={})
    assert cpu.hide and cpu.devices is None and cpu.per_trial == 0
    none = plan(job_with((1, 0)), gpus=None, ignore_accelerators=False, detect=lambda: pytest.fail("no detect"),
                environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert none.devices is None


def test_parse_cuda_visible_devices():
    assert parse_cuda_visible_devices("0,2") == ("0", "2")
    assert parse_cuda_visible_devices(" 3 , GPU-aaaa,MIG-bbbb ") == ("3", "GPU-aaaa", "MIG-bbbb")
    assert parse_cuda_visible_devices("") == ()
    assert parse_cuda_visible_devices("-1") == ()  # CUDA's own "no GPU"
    assert parse_cuda_visible_devices("1,-1,2") == ("1",)  # CUDA ignores what follows an invalid index
    assert parse_cuda_visible_devices("NoDevFiles") == ()  # Slurm: a GPU gres without device files
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES must list each device once"):
        parse_cuda_visible_devices("1,1")


def never():
    pytest.fail("nvidia-smi asked although CUDA_VISIBLE_DEVICES is set")


def test_plan_hands_out_the_allocation_cuda_visible_devices_names():
    job = job_with((1, 1), (1, 1))
    got = plan(job, gpus=None, ignore_accelerators=False, detect=never, environ={"CUDA_VISIBLE_DEVICES": "2,5,6"})
    assert got == DevicePlan(devices=("2", "5", "6"), counts=(1, 1), hide=False)
    alloc = DeviceAllocator(got.devices)
    assert alloc.allocate("1", got.counts) == (("2",), ("5",))
    assert alloc.allocate("2", got.counts) is None  # one id left: the next trial waits


def test_plan_gpus_flag_comes_before_the_allocation():
    got = plan(job_with((1, 1)), gpus="7", ignore_accelerators=False, detect=never,
               environ={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert got.devices == ("7",)


def test_plan_without_cuda_visible_devices_asks_nvidia_smi():
    got = plan(job_with((1, 1)), gpus=None, ignore_accelerators=False, detect=lambda: ("0", "1"),
               environ={"PATH": "/bin"})
    assert got.devices == ("0", "1")


@pytest.mark.parametrize(("value", "have"), [("", "no GPU"), ("-1", "no GPU"), ("4", r"1 GPU\(s\) \(4\)")])
def test_plan_too_small_allocation_names_cuda_visible_devices(value, have):
    with pytest.raises(ConfigError) as err:
        plan(job_with((2, 1)), gpus=None, ignore_accelerators=False, detect=lambda: ("0", "1", "2"),
             environ={"CUDA_VISIBLE_DEVICES": value})
    msg = str(err.value)
    assert "\n" not in msg and "2 accelerator(s) per trial" in msg
    import re

    assert re.search(f"this worker's allocation has {have} from CUDA_VISIBLE_DEVICES;", msg), msg
    assert err.value.exit_code == 2


def test_ignore_accelerators_hides_an_allocation_too():
    got = plan(job_with((1, 1)), gpus=None, ignore_accelerators=True, detect=never,
               environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert got.hide and replica_env(None, hide=got.hide) == {"CUDA_VISIBLE_DEVICES": ""}


def test_replica_env():
    assert replica_env(("1", "3"), hide=False) == {"CUDA_VISIBLE_DEVICES": "1,3"}
    assert replica_env((), hide=False) == {"CUDA_VISIBLE_DEVICES": ""}  # managed, no device: none
    assert replica_env(None, hide=False) == {}
    assert replica_env(None, hide=True) == {"CUDA_VISIBLE_DEVICES": ""}


# --- through the CLI, with real trial processes (journal storage, no database) -------------------
TRAINER = str(Path(__file__).resolve().parents[2] / "postgres" / "pg_trainer.py")


def gpu_spec(tmp_path, *, accelerators, parallel, points=4):
    events = shared_folder(tmp_path / "gcs") / "events.jsonl"  # the job's buckets: see sweep()
    values = ", ".join(f"{0.1 * (i + 1):.1f}" for i in range(points))
    args = json.dumps([f"--events={events}", "--epochs=3", "--sleep=0.1"])
    spec = tmp_path / "gpu.yaml"
    spec.write_text(
        "studySpec:\n  metrics: [{metricId: score, goal: MAXIMIZE}]\n"
        f"  parameters: [{{parameterId: x, discreteValueSpec: {{values: [{values}]}}}}]\n"
        f"  algorithm: GRID_SEARCH\nmaxTrialCount: {points}\nparallelTrialCount: {parallel}\n"
        "trialJobSpec:\n  baseOutputDirectory: {outputUriPrefix: gs://b/out}\n  workerPoolSpecs:\n"
        f"  - {{machineSpec: {{machineType: n1-standard-4, acceleratorType: NVIDIA_TESLA_T4, "
        f"acceleratorCount: {accelerators}}}, replicaCount: 1, containerSpec: "
        f"{{imageUri: local, command: [python, {json.dumps(TRAINER)}], args: {args}}}}}\n")
    return spec, events


def sweep(tmp_path, *argv, env=None):
    # From a folder of its own; the trainers see the host copy-on-write but for the job's buckets, which
    # hold their events file.
    launch = tmp_path / "launch"
    launch.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "trials", "sweep", *argv, "--gcs-root", str(tmp_path / "gcs")],
                          cwd=launch,
                          capture_output=True, text=True, timeout=60,
                          env=None if env is None else {**os.environ, **env})


@pytest.mark.integration
def test_cli_without_gpus_exits_2_in_one_line_before_creating_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on PATH
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # nor an allocation
    spec, _ = gpu_spec(tmp_path, accelerators=1, parallel=2)
    run = sweep(tmp_path, str(spec), "--job-id", "g")
    assert run.returncode == 2, run
    assert len(run.stderr.strip().splitlines()) == 1 and "no GPU" in run.stderr
    assert not (tmp_path / "launch" / "trials-jobs" / "g").exists()


@pytest.mark.integration
def test_cli_gpus_are_exclusive_and_trials_wait_for_them(tmp_path):
    spec, events = gpu_spec(tmp_path, accelerators=1, parallel=3)
    run = sweep(tmp_path, str(spec), "--job-id", "g", "--gpus", "5,7")
    assert run.returncode == 0, run.stdout + run.stderr
    evs = [json.loads(line) for line in events.read_text().splitlines()]
    spans = {}
    for e in evs:
        spans.setdefault(e["trial"], {})[e["event"]] = e
    assert len(spans) == 4
    for a in spans.values():
        assert a["start"]["gpus"] in ("5", "7")
        for b in spans.values():
            overlap = a is not b and a["start"]["t"] < b["end"]["t"] and b["start"]["t"] < a["end"]["t"]
            assert not (overlap and a["start"]["gpus"] == b["start"]["gpus"])
    assert "at most 2 in parallel" in run.stdout  # parallelTrialCount 3, but two devices


@pytest.mark.integration
def test_cli_hands_out_the_workers_cuda_visible_devices_and_env_json_shows_them(tmp_path):
    spec, events = gpu_spec(tmp_path, accelerators=1, parallel=2)
    run = sweep(tmp_path, str(spec), "--job-id", "a", env={"CUDA_VISIBLE_DEVICES": "3,6"})
    assert run.returncode == 0, run.stdout + run.stderr
    starts = [json.loads(line) for line in events.read_text().splitlines() if '"start"' in line]
    assert len(starts) == 4 and {s["gpus"] for s in starts} <= {"3", "6"}
    for trial in range(1, 5):
        env = json.loads((tmp_path / "launch" / "trials-jobs" / "a" / str(trial) / "env.json").read_text())
        got = env["workerpool0-0"]["CUDA_VISIBLE_DEVICES"]
        assert got == next(s["gpus"] for s in starts if s["trial"] == str(trial))


@pytest.mark.integration
def test_cli_env_json_shows_a_replica_device_equal_to_the_workers_own(tmp_path):
    spec, events = gpu_spec(tmp_path, accelerators=1, parallel=1, points=1)
    run = sweep(tmp_path, str(spec), "--job-id", "b", env={"CUDA_VISIBLE_DEVICES": "3"})  # one GPU, as Slurm gives
    assert run.returncode == 0, run.stdout + run.stderr
    env = json.loads((tmp_path / "launch" / "trials-jobs" / "b" / "1" / "env.json").read_text())
    assert env["workerpool0-0"]["CUDA_VISIBLE_DEVICES"] == "3"


@pytest.mark.integration
def test_cli_an_empty_allocation_exits_2_naming_cuda_visible_devices(tmp_path):
    spec, _ = gpu_spec(tmp_path, accelerators=1, parallel=1)
    run = sweep(tmp_path, str(spec), "--job-id", "e", env={"CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 2, run
    assert run.stderr.strip().splitlines() == [run.stderr.strip()]
    assert "no GPU from CUDA_VISIBLE_DEVICES" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "launch" / "trials-jobs" / "e").exists()


@pytest.mark.integration
def test_cli_ignore_accelerators_runs_on_cpu(tmp_path):
    spec, events = gpu_spec(tmp_path, accelerators=2, parallel=2, points=2)
    run = sweep(tmp_path, str(spec), "--job-id", "c", "--ignore-accelerators")
    assert run.returncode == 0, run.stdout + run.stderr
    starts = [json.loads(line) for line in events.read_text().splitlines() if '"start"' in line]
    assert [s["gpus"] for s in starts] == ["", ""]
