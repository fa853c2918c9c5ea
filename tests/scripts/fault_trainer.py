"""A tiny trainer that misbehaves on purpose: one ``--fault`` per run, the metric via cloudml-hypertune.

Every step reports ``loss = (x - 0.3)**2 + 1/(step + 1)`` (deterministic per parameter set, so a
restarted trial reports the same values again). Faults:

  none         behave: report ``--epochs`` steps, exit 0
  crash        raise at a random epoch (seeded by the trial id and the attempt): exit 1
  transient    exit 139 (a segfault's status) on attempt 0 at a random epoch, then behave
  hang         report one step, then sleep without output, ignoring SIGTERM
  flood        write ``--flood-mb`` MiB to stdout without newlines and then with, then behave
  torn         write a torn hypertune line, a non-JSON line and a good line, then exit 0
  huge         write a ~6 MiB hypertune file (garbage lines, then a good line), then exit 0
  nan          report NaN as the last value
  wrong_tag    report the tag ``accuracy`` instead of ``loss``
  no_metric    exit 0 without reporting anything
  fork         fork a child that ignores SIGTERM and sleeps (it writes its pid to child.pid)
  spawn        fork a child that sleeps (SIGTERM ends it), then behave
  fill         write ``--fill-mb`` MiB into the trial directory (a full disk stops it), then behave
  argv         write sys.argv[1:] as JSON to argv.json in the trial directory, then behave
  drift        behave, but every restart reports values 0.01 higher (not restart-consistent)
  slowstop     behave, but take ``--stop-s`` seconds to stop on SIGTERM, then exit 75

``--gate=PATH`` (any fault): the last step waits until PATH exists, so a test holds its trials
running until it has checked what it wants, instead of giving them a duration it hopes is long enough.
"""
import json
import os
import random
import signal
import sys
import time


def flag(name, default):
    prefix = f"--{name}="
    for i, arg in enumerate(sys.argv[1:], 1):
        if arg.startswith(prefix):
            return arg[len(prefix):]
        if arg == f"--{name}" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return default


def main():
    fault = flag("fault", "none")
    epochs = int(flag("epochs", "3"))
    sleep_s = float(flag("sleep", "0.02"))
    gate = flag("gate", "")
    x = float(flag("x", "0.5"))
    trial_id = os.environ.get("CLOUD_ML_TRIAL_ID", "0")
    attempt = int(os.environ.get("TRIALS_ATTEMPT", "0"))
    trial_dir = os.environ.get("TRIALS_TRIAL_DIR") or os.path.dirname(os.environ["CLOUD_ML_HP_METRIC_FILE"])
    metric_file = os.environ["CLOUD_ML_HP_METRIC_FILE"]
    rng = random.Random(f"{trial_id}:{attempt}")
    if fault == "slowstop":
        stop_s = float(flag("stop-s", "0.3"))

        def stop(signum, frame):
            time.sleep(stop_s)
            os._exit(75)

        signal.signal(signal.SIGTERM, stop)

    if fault == "argv":
        with open(os.path.join(trial_dir, "argv.json"), "w", encoding="utf-8") as f:
            json.dump(sys.argv[1:], f)
    if fault == "no_metric":
        print("trained without reporting", flush=True)
        return 0
    if fault == "torn":
        with open(metric_file, "w", encoding="utf-8") as f:
            f.write('{"loss": "0.5", "global_st\n')
            f.write("not json at all\n")
            f.write(json.dumps({"loss": "0.25", "global_step": "1", "timestamp": time.time(),
                                "trial": trial_id, "checkpoint_path": ""}) + "\n")
            f.write('{"loss": "0.1", "glo')  # torn last line, never completed
        return 0
    if fault == "huge":
        with open(metric_file, "w", encoding="utf-8") as f:
            junk = "x" * 1023 + "\n"
            for _ in range(6 * 1024):
                f.write(junk)
            f.write(json.dumps({"loss": "0.125", "global_step": "7", "timestamp": time.time(),
                                "trial": trial_id, "checkpoint_path": ""}) + "\n")
        return 0
    if fault == "fill":
        chunk = b"\0" * (1 << 20)
        with open(os.path.join(trial_dir, "fill.bin"), "wb") as f:
            for _ in range(int(flag("fill-mb", "64"))):
                f.write(chunk)
                f.flush()
    if fault in ("fork", "spawn"):
        child = os.fork()
        if child == 0:
            if fault == "fork":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(120)
            os._exit(0)
        with open(os.path.join(trial_dir, "child.pid"), "w", encoding="utf-8") as f:
            f.write(str(child))
    if fault == "flood":
        chunk = "y" * (1 << 20)
        for _ in range(int(flag("flood-mb", "8"))):
            sys.stdout.write(chunk)
        sys.stdout.write("\n")
        for i in range(20000):
            sys.stdout.write(f"line {i}\n")
        sys.stdout.flush()

    import hypertune

    ht = hypertune.HyperTune()
    tag = "accuracy" if fault == "wrong_tag" else "loss"
    crash_at = rng.randrange(epochs) if fault in ("crash", "transient") else -1
    for step in range(1, epochs + 1):
        if step - 1 == crash_at and (fault == "crash" or attempt == 0):
            if fault == "crash":
                raise RuntimeError(f"injected crash at epoch {step}")
            os._exit(139)
        time.sleep(sleep_s)
        while gate and step == epochs and not os.path.exists(gate):
            time.sleep(0.02)
        value = (x - 0.3) ** 2 + 1.0 / (step + 1)
        if fault == "drift":
            value += 0.01 * attempt
        if fault == "nan" and step == epochs:
            value = float("nan")
        ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag=tag, metric_value=value,
                                               global_step=step)
        if fault == "hang":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
