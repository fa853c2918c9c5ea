"""The benchmark code runs at tiny sizes and its pure parts compute the right things (no timing asserts)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import controller_overhead as co
from benchmarks import early_stopping as es
from benchmarks import report, scale
from benchmarks import search_quality as sq

TINY = co.Sizes(n_trials=2, epochs=2, work_ms=1.0, repeats=1, profile_trials=2)


# --- pure parts -------------------------------------------------------------------------------------
def test_test_functions_reach_their_known_optima():
    assert sq.branin((math.pi, 2.275)) == pytest.approx(0.397887, abs=1e-6)
    assert sq.hartmann6((0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)) == pytest.approx(-3.32237, abs=1e-4)
    assert sq.rosenbrock([1.0] * 5) == 0.0
    for p in sq.PROBLEMS:
        assert p.fn([lo for lo, _ in p.bounds]) > p.optimum


def test_search_summary_flags_a_default_worse_than_the_best_beyond_noise():
    runs = []
    for seed, (good, bad) in enumerate([(0.1, 5.0), (0.2, 5.1), (0.15, 4.9)]):
        runs.append({"problem": "p", "sampler": "tpe", "seed": seed, "regret": [good], "seconds": 0.1})
        runs.append({"problem": "p", "sampler": "default", "seed": seed, "regret": [bad], "seconds": 0.1})
    summary = sq.summarize(runs, ["p"], ["default", "tpe"], [1])
    cell = summary["cells"]["p@1"]
    assert cell["best"] == "tpe" and not cell["default_within_noise"]
    assert summary["default_never_worse_than_best_beyond_noise"] is False


def test_stopping_summary_measures_savings_against_the_same_seed():
    runs = [{"variant": v, "seed": 0, "epochs": 100 if v == "none" else 50, "seconds": 2.0 if v == "none" else 1.0,
             "best_final": 0.98 if v == "none" else 0.978, "n_stopped": 0 if v == "none" else 5}
            for v in es.VARIANTS]
    summary = es.summarize(runs, [0])
    row = summary["variants"]["median"]
    assert row["epochs_saved"] == pytest.approx(0.5) and row["time_saved"] == pytest.approx(0.5)
    assert row["delta_points"] == pytest.approx(-0.2)
    assert summary["goal_default_saves_40pct_at_no_loss"] is True


def test_candidate_median_rules_stop_a_trial_below_the_completed_curves():
    completed = [[(1.0, 0.5), (2.0, 0.8), (3.0, 0.9)]] * 3
    low = [(1.0, 0.1), (2.0, 0.2)]
    for name in es.CANDIDATE_VARIANTS:
        decide = es.candidate_rule(name)
        assert decide(None, low, completed).stop
        assert not decide(None, [(1.0, 0.6), (2.0, 0.85)], completed).stop


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
    run = sq.one_run("noisy_hartmann6", "default", 0, 4)
    assert len(run["regret"]) == 4 and all(r >= 0 for r in run["regret"])
    assert run["regret"] == sorted(run["regret"], reverse=True)  # best so far never gets worse
    for variant in ("none", "median", "successive_halving"):
        out = es.run_variant(variant, 0, 4, 3)
        assert len(out["trials"]) == 4 and 0 <= out["best_final"] <= 1


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
    assert set(data["summary"]["variants"]) == set(es.VARIANTS)
    assert "Early stopping" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["no-such-part"])
