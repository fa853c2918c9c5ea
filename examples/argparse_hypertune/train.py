"""A trainer written the usual Vertex way: argparse flags in, cloudml-hypertune metrics out.

It knows nothing about `trials`: the same file runs on Vertex AI and under `trials sweep`, and it
follows Google's checklist for Vertex training code (`trials check` passes it): a checkpoint in
AIP_CHECKPOINT_DIR every epoch and a resume from it after a restart, SIGTERM handled (finish the
epoch, save, exit), one JSON object per log line for Cloud Logging, the model in AIP_MODEL_DIR.
Logistic regression by minibatch gradient descent on a fixed synthetic dataset (numpy only).
"""

import argparse
import json
import math
import os
import signal
import sys

import hypertune
import numpy as np


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--l2", type=float, default=1e-4)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--n_samples", type=int, default=2000)
    return parser.parse_args(argv)


def make_data(n, d=20, seed=0):
    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=d)
    x = rng.normal(size=(n, d))
    p = 1.0 / (1.0 + np.exp(-(x @ w_true)))
    y = (rng.random(n) < p).astype(float)
    cut = int(0.8 * n)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def log_loss(w, x, y):
    p = np.clip(1.0 / (1.0 + np.exp(-(x @ w))), 1e-7, 1 - 1e-7)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def log(message, severity="INFO"):
    """One JSON object per line: Cloud Logging turns it into a structured entry."""
    print(json.dumps({"severity": severity, "message": message}), flush=True)


def local(path):
    """gs://bucket/x is /gcs/bucket/x inside a Vertex container (Cloud Storage FUSE)."""
    return "/gcs/" + path[len("gs://"):] if path.startswith("gs://") else path


def save_checkpoint(path, epoch, w, rng):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp.npz"
    np.savez(tmp, w=w, epoch=epoch, rng=json.dumps(rng.bit_generator.state))
    os.replace(tmp, path)  # a restart never sees half a checkpoint


def main(argv=None):
    args = parse_args(argv)
    x, y, x_val, y_val = make_data(args.n_samples)
    rng = np.random.default_rng(1)
    w = np.zeros(x.shape[1])
    start = 1
    stop = {"requested": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(requested=True))
    ckpt_dir = os.environ.get("AIP_CHECKPOINT_DIR")
    ckpt = os.path.join(local(ckpt_dir), "state.npz") if ckpt_dir else None
    if ckpt and os.path.exists(ckpt):
        with np.load(ckpt) as state:
            w, start = state["w"], int(state["epoch"]) + 1
            rng.bit_generator.state = json.loads(str(state["rng"]))
        log(f"resumed from the checkpoint of epoch {start - 1}")
    reporter = hypertune.HyperTune()  # writes to $CLOUD_ML_HP_METRIC_FILE on Vertex and locally
    for epoch in range(start, args.epochs + 1):
        order = rng.permutation(len(x))
        for start in range(0, len(x), args.batch_size):
            idx = order[start:start + args.batch_size]
            p = 1.0 / (1.0 + np.exp(-(x[idx] @ w)))
            grad = x[idx].T @ (p - y[idx]) / len(idx) + args.l2 * w
            w -= args.learning_rate * grad
        val_loss = log_loss(w, x_val, y_val)
        accuracy = float(np.mean(((x_val @ w) > 0) == (y_val > 0.5)))
        log(f"epoch {epoch}: val_loss={val_loss:.4f} accuracy={accuracy:.4f}")
        reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="val_loss", metric_value=val_loss, global_step=epoch)
        if ckpt:
            save_checkpoint(ckpt, epoch, w, rng)
        if stop["requested"]:
            log(f"SIGTERM: stopped after epoch {epoch}, checkpoint saved", "WARNING")
            sys.exit(0)
        if not math.isfinite(val_loss):
            break
    model_dir = os.environ.get("AIP_MODEL_DIR")
    if model_dir:
        os.makedirs(local(model_dir), exist_ok=True)
        np.save(os.path.join(local(model_dir), "weights.npy"), w)


if __name__ == "__main__":
    main()
