"""The benchmark code runs at tiny sizes and its pure parts compute the right things (no timing asserts)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import controller_overhead as co
from benchmarks import early_stopping as es
from benchmarks import report, scale
from benchmarks import search_problems as sp
from benchmarks import search_quality as sq
from trials.study.samplers import gp_available

TINY = co.Sizes(n_trials=2, epochs=2, work_ms=1.0, repeats=1, profile_trials=2)


# --- pure parts -------------------------------------------------------------------------------------
def test_test_functions_reach_their_known_optima():
    assert sp.branin((math.pi, 2.275)) == pytest.approx(0.397887, abs=1e-6)
    assert sp.hartmann6((0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)) == pytest.approx(-3.32237, abs=1e-4)
    assert sp.rosenbrock([1.0] * 5) == 0.0
    assert sp.conditional({"branch": "b", "b_x": 0.7, "b_n": 5}) == 0.0
    assert sp.mixed({"x1": math.pi, "n": 2, "kind": "plain"}) == pytest.approx(sp.mixed_optimum(), abs=0.05)
    for p in sp.PROBLEMS:
        if p.bounds:
            assert p.fn({f"x{i}": lo for i, (lo, _) in enumerate(p.bounds)}) > p.optimum()
        assert sp.study_spec(p).parameters


def test_search_summary_flags_a_default_worse_than_the_best_beyond_noise():
    runs = []
    for seed, (good, bad) in enumerate([(0.1, 5.0), (0.2, 5.1), (0.15, 4.9)]):
        for sampler, value in (("tpe", good), ("default", bad)):
            runs.append({"problem": "branin", "sampler": sampler, "seed": seed, "batch": 1, "regret": [value],
                         "suggest_s_per_trial": 0.1})
    summary = sq.summarize(runs, [1])
    cell = summary["cells"]["branin@1x1"]
    assert cell["best"] == "tpe" and not cell["default_within_noise"]
    assert summary["default_never_worse_than_best_beyond_noise"] is False
    assert "| branin " in sq.render(summary, [1], "note")


def test_search_summary_counts_a_seed_once_when_it_ran_to_40_and_to_100_trials():
    runs = [{"problem": "branin", "sampler": s, "seed": seed, "batch": 1, "regret": [1.0] * n,
             "suggest_s_per_trial": 0.1} for s in ("default", "tpe") for seed in (0, 1, 2) for n in (40,)]
    runs.append({"problem": "branin", "sampler": "tpe", "seed": 0, "batch": 1, "regret": [1.0] * 39 + [0.5] * 61,
                 "suggest_s_per_trial": 0.1})  # seed 0 again, run on to 100 trials
    cells = sq.summarize(runs, [40, 100])["cells"]
    assert cells["branin@40x1"]["samplers"]["tpe"]["n"] == 3  # not 4: the same seed's two runs are one
    assert cells["branin@40x1"]["samplers"]["tpe"]["median"] == 1.0
    assert "branin@100x1" not in cells  # the default reached 100 with no seed


def test_half_log_keeps_the_better_half_and_compresses_the_worse_one_smoothly():
    y = np.array([-1e6, -1e3, -10.0, -3.0, -2.0, -1.0, 0.0])  # labels to maximise: a heavy bad tail
    w, dw = sq.half_log(y)
    assert (w[y >= np.median(y)] == y[y >= np.median(y)]).all()
    assert (np.diff(w) > 0).all()  # monotone
    assert w[0] > -1e6 and w[0] - w[1] < 50  # a million times further away becomes a few spreads
    eps = 1e-6  # dw is the derivative (the evidence's Jacobian); moving a worse value moves no median or spread
    for i in (0, 1, 2, 5):
        moved = y.copy()
        moved[i] += eps
        assert (sq.half_log(moved)[0][i] - w[i]) / eps == pytest.approx(dw[i], rel=1e-3)
    assert dw[0] < 1e-3 < dw[2] < dw[5] == 1.0
    assert sq.half_log(np.array([2.0, 2.0, 2.0]))[1] is None


@pytest.mark.skipif(not gp_available("gp"), reason="GPSampler needs torch and scipy")
def test_evidence_choice_warps_a_heavy_tailed_objective_and_not_a_smooth_one():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    chosen = {}
    for name, fn in (("heavy", lambda x, y: math.exp(3 * abs(x)) + math.exp(3 * abs(y))),
                     ("smooth", lambda x, y: (x - 0.3) ** 2 + (y + 0.2) ** 2)):
        sampler = sq.VARIANTS["gp-select"](0)
        study = optuna.create_study(sampler=sampler)
        for _ in range(16):
            trial = study.ask()
            study.tell(trial, fn(trial.suggest_float("x", -5, 5), trial.suggest_float("y", -5, 5)))
        chosen[name] = [warped for _, warped, _ in sampler.choices]
    assert len(chosen["heavy"]) == 6 and all(chosen["heavy"][-3:])
    assert not any(chosen["smooth"][-3:])


def test_stopping_replay_counts_work_stops_and_futile_stops():
    job = [[(1000.0, v)] for v in (0.9, 0.8, 0.85, 0.7, 0.6) * 3]  # one report per trial, at its end
    old = es.replay(job, es.decider({"rule": "old_median"}))
    assert old["futile"] == old["n_stopped"] > 0 and old["work"] == 15000  # stops that save nothing
    new = es.replay(job, es.decider(es.variants()["default_median"]))
    assert new["n_stopped"] == 0 and new["best"] == 0.9
    rising = [[(float(t), q * t) for t in range(1, 11)] for q in (1.0, 0.9, 0.95, 0.8, 0.85, 0.97, 1.0, 0.9, 0.1)]
    out = es.replay(rising, es.decider(es.variants()["default_median"]))
    # 0.95, 0.8 and 0.85 run to their end: fewer than 5 trials give the leaders' bar, and fewer than 2 completed
    # curves were behind them at a step to say how far a curve from there gets (the rule waits); then 0.97, 0.9
    # and 0.1 stop at step 1 behind the leader (1.0), and the second 1.0 runs
    assert out["n_stopped"] == 3 and out["work"] == 6 * 10 + 3 and out["futile"] == 0 and out["best"] == 10.0
    prev = es.replay(rising, es.decider(es.variants()["prev_median"]))  # waited for 10 completed trials
    assert prev["n_stopped"] == 0 and prev["work"] == 90


def test_scale_window_cost_and_tables():
    starts = [0.1 * i for i in range(300)]
    assert scale._window_cost(starts, True) == pytest.approx(0.1)
    assert scale._window_cost(starts, False) == pytest.approx(0.1)
    text = report.table("t", ["a", "b"], [["x", 1.23456], ["y", float("nan")]])
    assert "| x | 1.23 |" in text and "n/a" in text


def test_controller_summary_ratios():
    def runs(wall, span):
        return [{"wall_s": wall, "span_s": span, "gaps_s": [0.01]}]

    sizes = co.Sizes(n_trials=10, epochs=10, work_ms=10.0)  # 1 s of work
    raw = {"floor1": runs(1.5, 1.4), "naive1": runs(3.0, 2.5), "sweep1": runs(1.6, 1.5),
           "floor2": runs(1.0, 0.9), "naive2": runs(2.0, 1.8), "sweep2": runs(0.8, 0.7)}
    s = co.summarize(raw, sizes)
    assert s["modes"]["sweep1"]["overhead_ms_per_trial"] == pytest.approx(60)
    assert s["speedup_2_slots"]["sweep"] == pytest.approx(2.0)
    assert s["ratios"]["1"]["naive_over_sweep_overhead"] == pytest.approx(200 / 60)


# --- real processes at tiny sizes -------------------------------------------------------------------
@pytest.mark.integration
def test_floor_naive_and_sweep_run_the_same_trials():
    for mode in ("floor", "naive", "sweep"):
        out = co.run_mode(mode, TINY, 1)
        assert out["wall_s"] > 0 and len(out["gaps_s"]) == TINY.n_trials - 1
    assert len(out["child_start_s"]) == TINY.n_trials  # the sweep's journal named every trial


@pytest.mark.integration
def test_search_and_stopping_runs_in_process():
    for name in ("noisy_hartmann6", "conditional", "mixed"):
        run = sq.one_run(name, "tpe", 0, 4, batch=2)
        assert len(run["regret"]) == 4 and all(r >= -1e-9 for r in run["regret"])
        assert run["regret"] == sorted(run["regret"], reverse=True)  # best so far never gets worse
    out = es.run_workload("noisy", 0, 4)
    assert {r["variant"] for r in out} == set(es.variants())


@pytest.mark.integration
def test_inprocess_scale_job_and_result_file(tmp_path):
    out = scale.inprocess_job(20)
    assert out["n_done"] == 20 and out["state"] == "JOB_STATE_SUCCEEDED"
    path = report.write_result("smoke", {"x": 1}, out_dir=str(tmp_path))
    with open(path) as f:
        data = json.load(f)
    assert data["part"] == "smoke" and data["machine"]["cpus"] >= 1


def test_digits_learning_curve_learns():
    from benchmarks.trainers import digits

    x_tr, y_tr, x_val, y_val = digits.load_digits()
    assert x_tr.shape == (1297, 64) and x_val.shape == (500, 64) and set(y_val.tolist()) == set(range(10))
    params = {"learning_rate": 0.1, "hidden": 32, "batch_size": 64, "weight_decay": 1e-5, "momentum": 0.9}
    curve = list(digits.train(params, epochs=3, seed=0))
    assert len(curve) == 3 and curve[-1] > 0.8


@pytest.mark.integration
def test_runner_writes_a_part_result_and_rejects_unknown_parts(tmp_path, capsys):
    from benchmarks.__main__ import main

    assert main(["stopping", "--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "stopping.json").read_text())
    assert set(data["summary"]["goals"]) == set(es.variants())
    assert "Early stopping" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["no-such-part"])


@pytest.mark.integration
def test_the_sandbox_part_times_each_start_quiet_and_beside_busy_cpus(tmp_path) -> None:
    from benchmarks import sandbox_start

    data = sandbox_start.run(quick=True, out_dir=str(tmp_path))
    if "skipped" in data:
        pytest.skip(data["skipped"])
    assert {"true: shim + sandbox", "true: shim, other CPUs busy", "true: shim + sandbox, other CPUs busy"} \
        <= set(data["median_ms"])
    assert all(v > 0 for v in data["median_ms"].values()) and math.isfinite(data["sandbox_cost_busy_ms"])
    assert {"true: shim, 16 MB dirty", "true: shim + sandbox, 16 MB dirty"} <= set(data["median_ms"])
    assert math.isfinite(data["sandbox_cost_dirty_ms"])
    assert json.loads((tmp_path / "sandbox.json").read_text())["median_ms"] == data["median_ms"]


def test_the_controller_profile_names_functions_that_exist() -> None:
    """The cProfile table matches by file and function name: a rename must not turn it into zeros."""
    import ast
    from pathlib import Path

    from benchmarks.controller_overhead import PROFILED

    root = Path(__file__).resolve().parent.parent
    for label, (file_part, func) in PROFILED.items():
        if file_part == "~" or not file_part.startswith("trials/"):
            continue
        tree = ast.parse((root / file_part).read_text(encoding="utf-8"))
        names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert func in names, f"{label}: {file_part} has no function {func}"


def test_the_start_up_stamps_name_functions_that_exist() -> None:
    """Each start-up step is stamped by module and attribute: a rename must not turn it into n/a."""
    import importlib

    from benchmarks.controller_startup import STEPS

    for label, (module, path) in STEPS.items():
        owner = importlib.import_module(module)
        for part in path.split("."):
            owner = getattr(owner, part, None)
            assert owner is not None, f"{label}: {module} has no {path}"


def test_start_up_parts_add_up_to_the_wall_before_the_first_trial_and_after_the_last() -> None:
    from benchmarks import controller_startup as cs

    stamps = {"first_line": 10.05, "main_end": 20.4, "cpu_s": 1.5, "steps": [
        ("import the CLI (trials.cli)", 10.06, 10.08), ("create the job (folder, journal, WAITING trials)", 10.4, 10.5),
        ("start the replica (spawn)", 10.6, 10.62), ("start the replica (spawn)", 15.0, 15.02),
        ("finish the job (end state)", 20.2, 20.21), ("summary (best trials printed)", 20.3, 20.31)]}
    parts = cs.parts(stamps, spawn=10.0, exit_=20.5, times={"1": (10.65, 14.9), "2": (15.05, 20.0)})
    assert parts["START-UP TOTAL (spawn to the first trial's first line)"] == pytest.approx(0.65)
    assert parts["first trial: spawned to its first line"] == pytest.approx(0.03)
    assert parts["start the replica (spawn)"] == pytest.approx(0.02)  # the first start, not the second
    # what no stamp covers (imports, parsing): the start-up less interpreter start, CLI, job, spawn, child start
    assert parts["other before the first trial (imports, ...)"] == pytest.approx(0.65 - 0.05 - 0.02 - 0.1 - 0.02 - 0.03)
    assert parts["sandbox probe"] != parts["sandbox probe"]  # not stamped in this run: n/a, not 0
    assert parts["END TOTAL (the last trial's end to exit)"] == pytest.approx(0.5)
    assert parts["interpreter exit (main returned to exit)"] == pytest.approx(0.1)
    assert parts["other after the last trial (exit seen, record, ...)"] == pytest.approx(0.5 - 0.01 - 0.01 - 0.1)
    assert parts[cs.CPU] == 1.5


def test_import_split_sums_each_modules_own_time_into_its_package() -> None:
    from benchmarks.controller_startup import import_split

    lines = ["import time: self [us] | cumulative | imported package",
             "import time:       100 |        100 |     numpy._core",
             "import time:       200 |        300 |   numpy",
             "import time:        50 |        350 | optuna",
             "import time:        10 |         10 | json"]
    assert import_split(lines) == pytest.approx({"numpy": 300e-6, "optuna": 50e-6, "stdlib and others": 10e-6})


def test_suggest_summary_ratios_and_goals() -> None:
    from benchmarks import suggest_ahead as sa

    def runs(wall: float, rss: float = 50.0, waited: float = 0.0, made: float = 0.0) -> list[dict[str, float]]:
        return [{"wall_s": wall, "rss_mib": rss, "suggest_wait_s": waited, "suggestions": made,
                 "suggest_cpu_s": made / 40}]

    raw = {"cpu 1": {"floor": runs(20.0), "tpe": runs(21.0), "default": runs(21.5, 64.0, 0.1, 29.0),
                 "inline": runs(40.0, 330.0)}}
    summary = sa.summarize(raw, sa.QUICK)
    row = summary["cpu 1"]
    assert math.isclose(row["default_over_tpe"], 21.5 / 21.0) and math.isclose(row["inline_over_tpe"], 40 / 21)
    assert math.isclose(row["idle_share"], 0.1 / 21.5)
    assert row["goals"] == {"default wall <= 1.05x tpe": True, "idle slot time from suggestions <= 1 %": True,
                            "controller RSS <= 80 MiB": True}
    text = sa.render(summary, [{"n": 10, "median_s": 0.12, "min_s": 0.1}], sa.QUICK)
    assert "| inline" in text and "0.47 %" in text and "| 10 " in text
    assert "| 29 / 0.72 s" in text  # the worker's suggestions and CPU


def test_paired_grids_count_each_seeds_win_and_the_geometric_ratio(tmp_path) -> None:
    def run(problem: str, seed: int, regret: float) -> str:
        return json.dumps({"problem": problem, "sampler": "default", "seed": seed, "batch": 4, "n_trials": 100,
                           "regret": [regret] * 100, "suggest_s_per_trial": 0.02}) + "\n"

    before, after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
    before.write_text(run("branin", 0, 1.0) + run("branin", 1, 1.0) + run("conditional", 0, 1.0))
    after.write_text(run("branin", 0, 4.0) + run("branin", 1, 0.25) + run("branin", 2, 9.0)
                     + run("conditional", 0, 100.0))
    text = sq.paired(str(before), str(after))
    assert "after / before 1.00" in text and "after won 2, lost 2" in text  # seed 2 has no pair; TPE's apart
    assert "| branin      | 40     | 4     | 2     |" in text


def test_slurm_summary_ratios_and_goals() -> None:
    from benchmarks import slurm_overhead as so

    sizes = so.Sizes(n_trials=10, epochs=1, work_ms=1.0, repeats=1)
    sweep = {"wall_s": 12.0, "startup_s": 1.5, "trainer_s": [0.3], "interpreter_s": 0.1, "import_cli_s": 0.05,
             "shared_check_s": 0.2, "first_sbatch_s": 0.01, "controller_cpu_s": 1.0}
    raw = {"baseline": [{"wall_s": 10.0, "trainer_s": [0.3]}], "baseline_srun": [{"wall_s": 8.0, "trainer_s": [0.3]}],
           "sweep": [sweep]}
    s = so.summarize(raw, sizes)
    assert s["ratio"] == pytest.approx(1.2) and s["ratio_steady"] == pytest.approx(1.05)
    assert s["baseline_s_per_trial"] == pytest.approx(1.0) and s["startup_s"] == 1.5
    assert s["ratio_srun"] == pytest.approx(1.5) and s["ratio_srun_steady"] == pytest.approx(10.5 / 8)
    assert list(s["goals"].values()) == [False, True]
    assert "| trials sweep --runtime slurm" in so.render(s, sizes)


@pytest.mark.integration
@pytest.mark.slurm
@pytest.mark.long
def test_slurm_part_runs_baseline_and_sweep_on_a_real_cluster(tmp_path) -> None:
    import os

    from benchmarks import slurm_overhead as so

    why = so.missing()
    if why is not None:
        if os.environ.get("TRIALS_REQUIRE_SLURM") == "1":
            pytest.fail(f"TRIALS_REQUIRE_SLURM=1 but {why}")
        pytest.skip(why)
    out = so.run(out_dir=str(tmp_path), sizes=so.Sizes(n_trials=2, epochs=1, work_ms=1.0, repeats=1))
    assert out["summary"]["ratio"] > 0 and out["summary"]["startup_s"] > 0
    assert {len(runs) for runs in out["raw"].values()} == {1}
    assert json.loads((tmp_path / "slurm.json").read_text())["part"] == "slurm"


def test_combined_replay_runs_the_loops_rule_over_the_recorded_curves():
    """Part 12's screen: no rule runs every epoch of the 20 trials; the product rule stops some, and its
    best final is a full-run value of the grid; the Optuna arm's pruner goes through ``should_prune``."""
    from benchmarks import combined, combined_replay

    grid = combined.load("digits")
    finals = {c[-1] for c in grid["curves"]}
    none = combined_replay.simulate("digits", 0, None, n_trials=8)
    assert none["epochs"] == 8 * grid["epochs"] and none["stopped"] == 0 and none["best_final"] in finals
    ruled = combined_replay.simulate("digits", 0, combined_replay.default_rule, n_trials=12)
    assert ruled["epochs"] < 12 * grid["epochs"] and ruled["stopped"] > 0 and ruled["best_final"] in finals
    pruned = combined_replay.simulate("digits", 0, combined_replay.optuna_pruner, n_trials=12, optuna_arm="tpe+median")
    # TPE's 10 start-up trials: 2 at a time, the 11th is asked when 9 finished, only the 12th after 10
    assert pruned["epochs"] <= 12 * grid["epochs"] and pruned["model"] == 1


def test_combined_replay_oracle_never_kills_a_good_trial_and_the_gp_veto_only_keeps():
    """The screen's two measuring variants: the oracle (the loop's rule, a perfect veto) kills no trial of the
    grid's top 10 % where the loop's rule kills one on the same seed; the GP over (params, step) keeps some
    trials the loop's rule stops (it only vetoes), so it runs more epochs on that seed and stops fewer."""
    from benchmarks import combined_replay

    ruled = combined_replay.simulate("gbdt", 10, combined_replay.default_rule)
    oracle = combined_replay.simulate("gbdt", 10, combined_replay.oracle_rule)
    vetoed = combined_replay.simulate("gbdt", 10, combined_replay.gp_veto_rule)
    assert ruled["killed"] >= 1 and oracle["killed"] == 0
    assert vetoed["stopped"] < ruled["stopped"] and vetoed["epochs"] > ruled["epochs"]
