"""The scorecard's verdicts, from observations (no process)."""

from trials.controller.check.scorecard import Observations, RunSeen, SeenReport, StopSeen, Verdict, format_text, judge


def reports(steps, tag="accuracy"):
    return [SeenReport(tag=tag, step=s, value=0.5) for s in steps]


def good_run(**kw):
    base = dict(exit_code=0, duration_s=2.0, reports=reports([1, 2, 3, 4]), first_report_s=0.5,
                n_log_lines=4, n_json_lines=4, written={"model": ["model.json"], "logs": ["e"], "checkpoints": ["c"]})
    base.update(kw)
    return RunSeen(**base)


def card(obs):
    return format_text(judge(obs)).splitlines()


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


def test_starting_over_without_a_checkpoint_warns_and_fails_only_when_strict():
    """Vertex restarts a replica after maintenance or a transient error but does not require it to resume."""
    over = dict(checkpoints_before_restart=[], restart=good_run(reports=reports([1, 2, 3, 4])))
    obs = Observations(metric_ids=("accuracy",), clean=good_run(), stop=good_stop(**over))
    assert not_passing(obs) == {"resume after restart": Verdict.WARN}
    resume = lines(obs)["resume after restart"]
    assert "no checkpoint" in resume.seen and resume.fix.startswith("recommended: save a checkpoint")
    strict = Observations(metric_ids=("accuracy",), clean=good_run(), stop=good_stop(**over), strict=True)
    assert not_passing(strict) == {"resume after restart": Verdict.FAIL}


def test_starting_over_with_a_checkpoint_fails_strict_or_not():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(),
                       stop=good_stop(checkpoints_before_restart=["state.json"],
                                      restart=good_run(reports=reports([1, 2, 3, 4]))))
    assert not_passing(obs) == {"resume after restart": Verdict.FAIL}
    assert "checkpoint state.json in AIP_CHECKPOINT_DIR not used" in lines(obs)["resume after restart"].seen


def test_sigterm_ending_the_process_by_its_default_action_is_named_never_passed():
    """Killed by SIGTERM (the host's replicas tell the signal; an image's, status 143) is no handling of it."""
    killed = dict(exit_code=143, exit_after_s=0.1, reported_before_restart=[1, 2], checkpoints_before_restart=[])
    host = lines(Observations(metric_ids=("accuracy",), clean=good_run(), stop=good_stop(signal=15, **killed)))
    assert host["SIGTERM"].verdict is Verdict.WARN
    assert host["SIGTERM"].seen == "did not handle SIGTERM: killed by it at step 2 of 4, nothing saved"
    image = lines(Observations(metric_ids=("accuracy",), clean=good_run(), in_image=True, stop=good_stop(**killed)))
    assert image["SIGTERM"].seen.startswith("did not handle SIGTERM: status 143, SIGTERM's default action")
    strict = lines(Observations(metric_ids=("accuracy",), clean=good_run(), strict=True,
                                stop=good_stop(signal=15, **killed)))
    assert strict["SIGTERM"].verdict is Verdict.FAIL
    # a handler that exits with the same status is not the default action, where the backend can tell
    handled = lines(Observations(metric_ids=("accuracy",), clean=good_run(), stop=good_stop(**killed)))
    assert handled["SIGTERM"].verdict is Verdict.PASS


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
    # it trained to its end: nothing was left to resume, and more epochs would not change that
    assert lines(obs)["resume after restart"].seen == "not seen: the run went on to its last step after SIGTERM"
    finishing_the_step = Observations(metric_ids=("accuracy",), clean=good_run(),
                                      stop=good_stop(reported_before_restart=[1, 2, 3],
                                                     restart=good_run(reports=reports([4]))))
    assert not_passing(finishing_the_step) == {}


def test_sigterm_after_the_last_step_is_inconclusive_not_a_pass():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(), longer_run="--params epochs=16",
                       stop=good_stop(sent_after_steps=[1, 2, 3, 4], reported_before_restart=[1, 2, 3, 4],
                                      restart=good_run(reports=[])))
    assert card(obs)[8:12] == [
        "WARN  SIGTERM                  inconclusive: it arrived after the last step (4 reports in 2.0 s)",
        "                               → run more epochs or steps (--params epochs=16) so that the run can be "
        "interrupted halfway",
        "WARN  resume after restart     inconclusive: restarted after the last step (4): resuming mid-run was not "
        "seen (4 reports in 2.0 s)",
        "                               → run more epochs or steps (--params epochs=16) so that the run can be "
        "interrupted halfway",
    ]


def test_a_restart_after_the_step_in_hand_was_the_last_is_inconclusive():
    # SIGTERM at step 3 of 4, the trainer finished step 4 and exited 0: it might have ignored SIGTERM
    obs = Observations(metric_ids=("accuracy",), clean=good_run(),
                       stop=good_stop(sent_after_steps=[1, 2, 3], reported_before_restart=[1, 2, 3, 4],
                                      restart=good_run(reports=[])))
    assert card(obs)[8:12] == [
        "WARN  SIGTERM                  inconclusive: SIGTERM came at step 3 of 4 and the run ended with its last "
        "step (4 reports in 2.0 s)",
        "                               → run more epochs or steps so that the run can be interrupted halfway",
        "WARN  resume after restart     inconclusive: restarted after the last step (4): resuming mid-run was not "
        "seen (4 reports in 2.0 s)",
        "                               → run more epochs or steps so that the run can be interrupted halfway",
    ]


def test_a_run_that_ended_before_sigterm_is_inconclusive_with_the_fix():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(), interrupt_missed=True,
                       longer_run="--params epochs=16")
    assert card(obs)[8:13] == [
        "WARN  SIGTERM                  inconclusive: the run ended before SIGTERM could be sent (4 reports in "
        "2.0 s)",
        "                               → run more epochs or steps (--params epochs=16) so that the run can be "
        "interrupted halfway",
        "WARN  resume after restart     inconclusive: not restarted: the run ended before SIGTERM could be sent "
        "(4 reports in 2.0 s)",
        "                               → run more epochs or steps (--params epochs=16) so that the run can be "
        "interrupted halfway",
        "SKIP  restart cost             not measured",
    ]
    assert card(obs)[-1] == "10 passed, 2 warnings, 0 failed, 2 not applicable"


def test_a_run_too_short_to_interrupt_is_not_applicable_and_says_why():
    short = Observations(metric_ids=("accuracy",), clean=good_run(reports=reports([4])))
    assert card(short)[10:12] == [
        "SKIP  SIGTERM                  fewer than 2 reports of the spec's metric: no middle to interrupt the run at",
        "SKIP  resume after restart     fewer than 2 reports of the spec's metric: no middle to interrupt the run at",
    ]
    crashed = Observations(metric_ids=("accuracy",), clean=good_run(exit_code=1))
    assert card(crashed)[9:11] == ["SKIP  SIGTERM                  the clean run did not exit 0: no run to interrupt",
                                    "SKIP  resume after restart     the clean run did not exit 0: no run to interrupt"]


def test_a_restart_that_takes_its_checkpoint_for_the_end_fails_resume():
    # resuming means training on from the checkpoint's step to the last one, not exiting 0 at once
    obs = Observations(metric_ids=("accuracy",), clean=good_run(reports=reports(range(1, 11))),
                       stop=good_stop(sent_after_steps=[1, 2, 3, 4, 5], reported_before_restart=[1, 2, 3, 4, 5, 6],
                                      restart=good_run(reports=[])))
    assert card(obs)[8:12] == [
        "PASS  SIGTERM                  exited 0.4 s after SIGTERM at step 5 of 10 (status 0)",
        "FAIL  resume after restart     the restarted replica exited 0 without reporting steps 7…10 (restarted at "
        "step 6)",
        "                               → load the checkpoint at start and train on from its step to the last epoch",
        "                                 (Vertex: a replica is restarted after a host maintenance or a transient "
        "error; it must resume)",
    ]


def test_the_scorecard_of_a_good_trainer_line_by_line():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(), stop=good_stop())
    assert card(obs) == [
        "PASS  runs                     exited 0 in 2.0 s",
        "PASS  metric tag               reports accuracy",
        "PASS  global step              steps 1…4, increasing",
        "PASS  reports per epoch        4 reports",
        "PASS  AIP_* outputs            set from the job's baseOutputDirectory",
        "PASS  model in AIP_MODEL_DIR   wrote model.json",
        "PASS  TensorBoard logs         wrote e",
        "PASS  writes outside AIP dirs  nothing written in its working folder",
        "PASS  SIGTERM                  exited 0.4 s after SIGTERM at step 2 of 4 (status 0)",
        "PASS  resume after restart     resumed at step 3 after a restart at step 2; none lost or twice",
        "INFO  restart cost             first report 0.6 s after a restart (first run: 0.5 s)",
        "PASS  structured logs          4 of 4 lines are JSON",
        "PASS  host cloud identity      not read",
        "SKIP  primary replica only     one replica in the spec",
        "12 passed, 0 warnings, 0 failed, 1 not applicable",
    ]


def test_no_output_is_not_applicable_to_structured_logs():
    obs = Observations(metric_ids=("accuracy",), clean=good_run(n_log_lines=0, n_json_lines=0), stop=good_stop())
    text = card(obs)
    assert text[11] == "SKIP  structured logs          no output"
    assert text[-1] == "11 passed, 0 warnings, 0 failed, 2 not applicable"


def test_each_rule_reads_after_its_vertex_label():
    obs = Observations(metric_ids=("accuracy",), has_base=False,
                       clean=good_run(reports=reports([1, 2], tag="val_acc"), outside_writes=["out.txt"],
                                      identity_reads=["$GOOGLE_CLOUD_PROJECT"], unset_reads=["$AIP_MODEL_DIR"],
                                      n_json_lines=0),
                       stop=good_stop(checkpoints_before_restart=[], restart=good_run(reports=reports([1, 2]))),
                       secondary=good_run(), secondary_name="workerpool1-0")
    rules = [line.strip() for line in card(obs) if line.strip().startswith("(Vertex:")]
    assert rules == [
        "(Vertex: the tuning metric is read from hypertune's reports with the spec's metric id as their tag)",
        "(Vertex: AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR are set only when the job has a "
        "baseOutputDirectory)",
        "(Vertex: only what is written under AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR is kept)",
        "(Vertex: a replica is restarted after a host maintenance or a transient error; without a checkpoint it "
        "starts over (allowed, but the time is lost))",
        "(Vertex: Cloud Logging reads one JSON object per line (severity, message) as a structured entry)",
        "(Vertex: the project is CLOUD_ML_PROJECT_ID and the credentials are the job's service account; the host's "
        "gcloud identity is not there)",
        "(Vertex: in distributed training only the primary replica (workerpool0-0) reports and saves)",
    ]


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
    assert resume.verdict is Verdict.WARN and "no baseOutputDirectory" in resume.seen
    assert resume.fix.startswith("recommended: give the job a baseOutputDirectory")


def test_a_trainer_reporting_every_ten_rounds_resumes_at_its_next_reported_step():
    every_ten = dict(metric_ids=("accuracy",), clean=good_run(reports=reports([10, 20, 30, 40])))
    resumed = Observations(**every_ten, stop=good_stop(sent_after_steps=[10, 20], restart=good_run(
        reports=reports([30, 40]))))
    assert card(resumed)[8:10] == [
        "PASS  SIGTERM                  exited 0.4 s after SIGTERM at step 20 of 40 (status 0)",
        "PASS  resume after restart     resumed at step 30 after a restart at step 20; none lost or twice",
    ]
    lost = Observations(**every_ten, stop=good_stop(sent_after_steps=[10, 20], restart=good_run(reports=reports([40]))))
    assert card(lost)[9] == "WARN  resume after restart     resumed at step 40 after step 20: step 30 lost"
