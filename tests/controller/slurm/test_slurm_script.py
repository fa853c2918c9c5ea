"""trials/controller/slurm/script.py: the batch script of one submission, its components, the checked
``--slurm-arg`` and ``--time`` (pure: text in, text out)."""

from __future__ import annotations

import ast
import shlex

import pytest

from trials.controller.slurm import script as sc


def _sub(components, **kw) -> sc.Submission:
    base = dict(job_name="trials-abc-3", comment="trials:host:12:34", output="/shared/job/slurm/s/slurm-%j.out",
                components=tuple(components), launch_file="/shared/job/slurm/s/launch.json",
                python="/venv/bin/python", package_root="/src/trials", srun="/usr/bin/srun")
    base.update(kw)
    return sc.Submission(**base)


def _directives(text: str) -> list[str]:
    return [line[len("#SBATCH "):] for line in text.splitlines() if line.startswith("#SBATCH ")]


def _components(text: str) -> list[list[str]]:
    """The directives of each het component (the job-wide ones before the first --ntasks dropped)."""
    parts: list[list[str]] = []
    for d in _directives(text):
        if d == "hetjob":
            parts.append([])
        elif d.startswith("--ntasks=") and not parts:
            parts.append([d])
        elif parts:
            parts[-1].append(d)
    return parts


def _exec_argv(text: str) -> list[str]:
    last = text.rstrip("\n").splitlines()[-1]
    assert last.startswith("exec ")
    return shlex.split(last[len("exec "):])


def test_one_pool_is_one_component_with_ntasks_and_no_het_group():
    text = sc.batch_script(_sub([sc.Component(ntasks=3)]))
    assert text.startswith("#!/bin/sh\n") and text.endswith("\n")
    directives = _directives(text)
    assert "hetjob" not in directives and "--ntasks=3" in directives
    assert "--no-requeue" in directives and "--export=ALL" in directives
    assert "--job-name=trials-abc-3" in directives and "--comment=trials:host:12:34" in directives
    assert not any(d.startswith(("--gpus", "--mem", "--partition", "--time")) for d in directives)
    argv = _exec_argv(text)
    assert argv[:3] == ["/usr/bin/srun", "--kill-on-bad-exit=0", "--export=ALL"]
    assert not any(a.startswith("--het-group") for a in argv)
    assert argv[3:5] == ["/venv/bin/python", "-c"] and argv[-1] == "/shared/job/slurm/s/launch.json"
    assert sc.ENTRY_MODULE in argv[5] and "'/src/trials'" in argv[5]


def test_one_replica_is_the_batch_step_itself_without_an_srun_step():
    text = sc.batch_script(_sub([sc.Component(ntasks=1, gpus_per_task=1)]))
    assert "--gpus-per-task=1" in _directives(text)
    lines = text.rstrip("\n").splitlines()
    assert lines[-3:-1] == ["SLURM_PROCID=0", "export SLURM_PROCID"]  # task 0 of the launch file
    argv = _exec_argv(text)
    assert argv[:2] == ["/venv/bin/python", "-c"] and "/usr/bin/srun" not in argv
    assert argv[-1] == "/shared/job/slurm/s/launch.json"


def test_several_pools_are_het_components_run_by_one_srun_over_every_group():
    comps = [sc.Component(ntasks=1, gpus_per_task=2, mem_per_task_mb=512), sc.Component(ntasks=2, mem_per_task_mb=512),
             sc.Component(ntasks=1, mem_per_task_mb=512)]
    text = sc.batch_script(_sub(comps, partition="gpu", time_limit_min=7, extra=("--qos=high", "--constraint=a100")))
    directives = _directives(text)
    assert directives.count("hetjob") == 2
    parts = _components(text)
    assert [p[0] for p in parts] == ["--ntasks=1", "--ntasks=2", "--ntasks=1"]
    for k, part in enumerate(parts):
        for want in ("--partition=gpu", "--time=7", "--qos=high", "--constraint=a100", "--cpus-per-task=1",
                     "--mem-per-cpu=512M"):
            assert want in part, (k, want, part)
        assert ("--gpus-per-task=2" in part) == (k == 0)
    # the job-wide options come once, before the first component
    assert directives.count("--no-requeue") == 1 and directives.count("--export=ALL") == 1
    assert directives.index("--no-requeue") < directives.index("--ntasks=1")
    assert "--het-group=0,1,2" in _exec_argv(text)


def test_two_pools_srun_names_both_groups():
    text = sc.batch_script(_sub([sc.Component(ntasks=1), sc.Component(ntasks=1)]))
    assert "--het-group=0,1" in _exec_argv(text)


def test_paths_with_spaces_and_quotes_are_one_word_each():
    odd = "/shared/my job's/slurm/s 1/launch.json"
    text = sc.batch_script(_sub([sc.Component(ntasks=1)], launch_file=odd, python="/my venv/bin/python",
                                package_root="/src dir/it's"))
    argv = _exec_argv(text)
    assert argv[-1] == odd and argv[0] == "/my venv/bin/python"  # one replica: the batch step runs its entry
    # the package root reaches sys.path exactly: a Python literal inside the -c code
    inserts = [node for node in ast.walk(ast.parse(argv[2])) if isinstance(node, ast.Call)
               and isinstance(node.func, ast.Attribute) and node.func.attr == "insert"]
    assert [ast.literal_eval(call.args[1]) for call in inserts] == ["/src dir/it's"]


def test_components_group_consecutive_replicas_of_one_pool_with_the_same_gpus():
    assert sc.components([0], [0], None) == (sc.Component(ntasks=1),)
    assert sc.components([0, 1, 1, 1], [1, 0, 0, 0], 256) == (
        sc.Component(ntasks=1, gpus_per_task=1, mem_per_task_mb=256), sc.Component(ntasks=3, mem_per_task_mb=256))
    assert sc.components([0, 1, 2], [0, 0, 0], None) == tuple(sc.Component(ntasks=1) for _ in range(3))
    # one pool whose replicas differ in GPUs: two components, task order kept
    assert sc.components([1, 1, 1], [0, 0, 2], None) == (sc.Component(ntasks=2),
                                                           sc.Component(ntasks=1, gpus_per_task=2))
    with pytest.raises(ValueError):
        sc.components([0, 1], [0], None)


@pytest.mark.parametrize("arg", ["--qos=high", "--constraint=a100", "-x", "--exclusive", "--gres=gpu:a100:1",
                                 "--mail-type=END,FAIL"])
def test_check_slurm_arg_accepts_one_option(arg):
    assert sc.check_slurm_arg(arg) == arg


@pytest.mark.parametrize("arg", ["--qos high", "--comment='x'", '--comment="x"', "--qos=a\\b", "qos=high", "",
                                 "--qos=high\n#SBATCH --export=ALL", "--qos=\thigh", "-"])
def test_check_slurm_arg_refuses_what_is_not_one_option(arg):
    with pytest.raises(ValueError, match="one sbatch option"):
        sc.check_slurm_arg(arg)


@pytest.mark.parametrize("arg", ["--export=ALL", "--requeue", "--no-requeue", "--hetjob", "--wrap=x", "--array=1-3",
                                 "-a", "--output=/x", "-o", "--error=/x", "-e", "--job-name=x", "-J", "--comment=x",
                                 "--parsable"])
def test_check_slurm_arg_refuses_the_options_trials_sets(arg):
    with pytest.raises(ValueError, match="set by trials"):
        sc.check_slurm_arg(arg)


def test_time_limit_is_past_the_timeout_and_its_grace():
    assert sc.time_limit_minutes(None, 10.0) is None
    assert sc.time_limit_minutes(0, 10.0) is None
    assert sc.time_limit_minutes(60, 0) == 2  # one minute, and one more
    assert sc.time_limit_minutes(50, 10.0) == 2
    assert sc.time_limit_minutes(51, 10.0) == 3
    assert sc.time_limit_minutes(3600, 30.0) == 62
    for timeout in (1, 59, 60, 61, 599, 3600):
        assert sc.time_limit_minutes(timeout, 10.0) * 60 > timeout + 10.0
