"""A Vertex-style trainer: cloudml-hypertune only (no trials runtime, so no ``metrics.jsonl``).

``--epochs`` epochs of ``--sleep`` seconds; after each it reports ``loss`` (deterministic per
``--x``) and checkpoints the epoch to ``$AIP_CHECKPOINT_DIR/ckpt.json`` (atomically); a restarted
process resumes after its checkpoint, so its hypertune file holds only the steps it ran itself.
``--also=TAG`` reports a second metric each epoch too (``epoch / 1000``).
"""
import json
import os
import sys
import time


def flag(name, default):
    prefix = f"--{name}="
    for arg in sys.argv[1:]:
        if arg.startswith(prefix):
            return arg[len(prefix):]
    return default


def main():
    epochs = int(flag("epochs", "8"))
    sleep_s = float(flag("sleep", "0.3"))
    x = float(flag("x", "0.5"))
    also = flag("also", "")
    ckpt_dir = os.environ.get("AIP_CHECKPOINT_DIR") or os.environ["TRIALS_TRIAL_DIR"]
    if ckpt_dir.startswith("gs://"):
        ckpt_dir = "/gcs/" + ckpt_dir[len("gs://"):]
    os.makedirs(ckpt_dir, exist_ok=True)
    path = os.path.join(ckpt_dir, "ckpt.json")
    try:
        with open(path, encoding="utf-8") as f:
            done = int(json.load(f)["epoch"])
    except (FileNotFoundError, ValueError, KeyError):
        done = 0

    import hypertune

    ht = hypertune.HyperTune()
    for epoch in range(done + 1, epochs + 1):
        time.sleep(sleep_s)
        loss = (x - 0.3) ** 2 + 1.0 / (epoch + 1)
        ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="loss", metric_value=loss,
                                               global_step=epoch)
        if also:
            ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag=also, metric_value=epoch / 1000,
                                                   global_step=epoch)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"epoch": epoch}, f)
        os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
