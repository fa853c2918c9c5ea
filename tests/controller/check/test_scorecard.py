"""The scorecard's verdicts, from observations (no process)."""

from trials.controller.check.scorecard import Observations, RunSeen, SeenReport, StopSeen, Verdict, format_text, judge


def reports(steps, tag="accuracy"):
    return [SeenReport(tag=tag, step=s, value=0.5) for s in steps]


def good_run(**kw):
    base = dict(exit_code=0, duration_s=2.0, reports=reports([1, 2, 3, 4]), first_report_s=0.5,
                n_log_lines=4, n_json_lines=4, written={"model": ["model.json"], "logs": ["e"], "checkpoints": ["c"]})
    base.update(kw)
    return RunSeen(**base)


def verdicts(obs):
    return {line.check: line.verdict for line in judge(obs)}


def not_passing(obs):
    return {c: v for c, v in verdicts(obs).items() if v not in (Verdict.PASS, Verdict.SKIP, Verdict.INFO)}


def good_stop(**kw):
    base = dict(sent_after_steps=[1, 2], exit_after_s=0.4, exit_code=0, grace_s=10,
                checkpoints_before_restart=["state.json"],
                restart=good_run(reports=reports([3, 4]), first_report_s=0.6))
    base.update(kw)
    return StopSeen(**base)


def test_a_good_trainer_passes_everything():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(), stop=good_stop())
    assert not_passing(obs) == {}


def test_starting_over_after_a_restart_fails_resume_only():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(),
                       stop=good_stop(checkpoints_before_restart=[], restart=good_run(reports=reports([1, 2, 3, 4]))))
    assert not_passing(obs) == {"resume after restart": Verdict.FAIL}
    assert "no checkpoint" in format_text(judge(obs))


def test_steps_reported_twice_or_lost_warn():
    twice = Observations(metric_ids=("accuracy",), clean=good_run(),
                         stop=good_stop(restart=good_run(reports=reports([2, 3, 4]))))
    lost = Observations(metric_ids=("accuracy",), clean=good_run(),
                        stop=good_stop(restart=good_run(reports=reports([4]))))
    assert not_passing(twice) == {"resume after restart": Verdict.WARN}
    assert not_passing(lost) == {"resume after restart": Verdict.WARN}


def test_ignoring_sigterm_fails():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(), stop=good_stop(exit_after_s=None, exit_code=-9))
    assert not_passing(obs) == {"SIGTERM": Verdict.FAIL}


def test_training_on_after_sigterm_fails_even_when_it_ends_in_time():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(),
                       stop=good_stop(reported_before_restart=[1, 2, 3, 4], restart=good_run(reports=[])))
    assert not_passing(obs) == {"SIGTERM": Verdict.FAIL}
    finishing_the_step = Observations(metric_ids=("accuracy",), clean=good_run(),
                                      stop=good_stop(reported_before_restart=[1, 2, 3],
                                                     restart=good_run(reports=reports([4]))))
    assert not_passing(finishing_the_step) == {}


def test_sigterm_after_the_last_step_tested_nothing():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(),
                       stop=good_stop(sent_after_steps=[1, 2, 3, 4], restart=good_run(reports=[])))
    assert verdicts(obs)["SIGTERM"] is Verdict.SKIP
    assert verdicts(obs)["resume after restart"] is Verdict.PASS


def test_wrong_tag_names_what_was_reported():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(reports=reports([1, 2], tag="val_acc")))
    assert not_passing(obs) == {"metric tag": Verdict.FAIL}
    text = format_text(judge(obs))
    assert "reported val_acc" in text and "hyperparameter_metric_tag='accuracy'" in text


def test_no_global_step_fails_and_one_report_warns():
    assert not_passing(Observations(metric_ids=("accuracy",), clean=good_run(reports=reports([None, None])))) == \
        {"global step": Verdict.FAIL}
    assert not_passing(Observations(metric_ids=("accuracy",), clean=good_run(reports=reports([1000])))) == \
        {"reports per epoch": Verdict.WARN}


def test_outside_writes_identity_and_secondary_replica():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(outside_writes=["out.txt"]))
    assert not_passing(obs) == {"writes outside AIP dirs": Verdict.FAIL}
    obs = Observations(metric_ids=("accuracy",), clean=good_run(identity_reads=["$GOOGLE_CLOUD_PROJECT"]))
    assert not_passing(obs) == {"host cloud identity": Verdict.FAIL}
    obs = Observations(metric_ids=("accuracy",), clean=good_run(), secondary=good_run(written={}),
                       secondary_name="workerpool1-0")
    assert not_passing(obs) == {"primary replica only": Verdict.FAIL}
    quiet = good_run(reports=[], written={})
    assert not_passing(Observations(metric_ids=("accuracy",), clean=good_run(), secondary=quiet)) == {}


def test_trainer_bytes_are_escaped_in_the_scorecard():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(exit_code=1, error_tail=["boom\x1b[2J\x07"]))
    text = format_text(judge(obs))
    assert "\x1b" not in text and "\x07" not in text and "boom" in text


def lines(obs):
    return {line.check: line for line in judge(obs)}


def test_without_a_base_reading_an_unset_aip_variable_fails_and_doing_without_it_is_info():
    no_base = dict(metric_ids=("accuracy",), stop=good_stop(), has_base=False)
    read = lines(Observations(clean=good_run(unset_reads=["$AIP_MODEL_DIR"]), **no_base))["AIP_* outputs"]
    assert read.verdict is Verdict.FAIL and "$AIP_MODEL_DIR" in read.seen and "outputUriPrefix" in read.fix
    crashed = lines(Observations(clean=good_run(soft_unset_reads=["$AIP_CHECKPOINT_DIR"], exit_code=1),
                                 **no_base))["AIP_* outputs"]
    assert crashed.verdict is Verdict.FAIL and "then exited with status 1" in crashed.seen
    did_without = lines(Observations(clean=good_run(soft_unset_reads=["$AIP_MODEL_DIR"]), **no_base))
    outputs = did_without["AIP_* outputs"]
    assert outputs.verdict is Verdict.INFO and "did without it" in outputs.seen
    assert did_without["model in AIP_MODEL_DIR"].verdict is Verdict.SKIP
    assert did_without["TensorBoard logs"].verdict is Verdict.SKIP
    none = lines(Observations(clean=good_run(), **no_base))["AIP_* outputs"]
    assert none.verdict is Verdict.INFO and "no baseOutputDirectory" in none.seen
    with_base = lines(Observations(metric_ids=("accuracy",), clean=good_run(), stop=good_stop()))
    assert with_base["AIP_* outputs"].verdict is Verdict.PASS


def test_without_a_base_starting_over_names_the_missing_base():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(), has_base=False,
                       stop=good_stop(checkpoints_before_restart=[], restart=good_run(reports=reports([1, 2, 3, 4]))))
    resume = lines(obs)["resume after restart"]
    assert resume.verdict is Verdict.FAIL and "no baseOutputDirectory" in resume.seen
    assert resume.fix.startswith("give the job a baseOutputDirectory")
