"""A trainer written the Vertex way (argparse + hypertune) that follows every rule `trials check`
checks, unless ``--break RULE`` makes it break exactly one of them."""

import argparse
import json
import os
import signal
import sys
import time

import hypertune

RULES = ("none", "no-checkpoint", "ignores-sigterm", "wrong-tag", "no-global-step", "every-replica-reports",
         "writes-workdir", "implicit-project", "done-on-restart")


def log(message, severity="INFO"):
    print(json.dumps({"severity": severity, "message": message}), flush=True)


def is_primary():
    task = json.loads(os.environ.get("CLUSTER_SPEC", "{}")).get("task", {})
    return task.get("type", "workerpool0") == "workerpool0" and task.get("index", 0) == 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--epoch_s", type=float, default=0.4)
    parser.add_argument("--break", dest="broken", choices=RULES, default="none")
    parser.add_argument("--soft-aip", action="store_true", help="read AIP_CHECKPOINT_DIR with .get (None if unset)")
    args = parser.parse_args()
    stop = {"requested": False}
    if args.broken == "ignores-sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.update(requested=True))
    if args.broken == "implicit-project":
        project = os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ["CLOUD_ML_PROJECT_ID"]
    else:
        project = os.environ["CLOUD_ML_PROJECT_ID"]
    log(f"project {project}")
    ckpt_dir = os.environ.get("AIP_CHECKPOINT_DIR") if args.soft_aip else os.environ["AIP_CHECKPOINT_DIR"]
    ckpt = os.path.join(ckpt_dir, "state.json")
    start = 1
    if args.broken != "no-checkpoint" and os.path.exists(ckpt):
        with open(ckpt) as f:
            start = json.load(f)["epoch"] + 1
        log(f"resumed from epoch {start - 1}")
        if args.broken == "done-on-restart":  # takes its checkpoint for a finished training
            log("a checkpoint is there: already trained")
            return
    primary = is_primary() or args.broken == "every-replica-reports"
    reporter = hypertune.HyperTune()
    accuracy = 0.5
    for epoch in range(start, args.epochs + 1):
        time.sleep(args.epoch_s)
        accuracy = 1 - 0.5 / (1 + args.learning_rate * epoch)
        if primary:
            tag = "val_acc" if args.broken == "wrong-tag" else "accuracy"
            step = None if args.broken == "no-global-step" else epoch
            reporter.report_hyperparameter_tuning_metric(hyperparameter_metric_tag=tag, metric_value=accuracy,
                                                         global_step=step)
            log(f"epoch {epoch}: accuracy={accuracy:.4f}")
        if args.broken != "no-checkpoint" and primary:
            os.makedirs(ckpt_dir, exist_ok=True)
            with open(ckpt + ".tmp", "w") as f:
                json.dump({"epoch": epoch}, f)
            os.replace(ckpt + ".tmp", ckpt)
        if stop["requested"]:
            log("SIGTERM: checkpoint saved, exiting", "WARNING")
            sys.exit(0)
    if args.broken == "writes-workdir":
        with open("out.txt", "w") as f:
            f.write(str(accuracy))
    if primary:
        for var, name in (("AIP_MODEL_DIR", "model.json"), ("AIP_TENSORBOARD_LOG_DIR", "events.json")):
            os.makedirs(os.environ[var], exist_ok=True)
            with open(os.path.join(os.environ[var], name), "w") as f:
                json.dump({"accuracy": accuracy}, f)


if __name__ == "__main__":
    main()
