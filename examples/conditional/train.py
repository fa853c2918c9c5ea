"""A conditional search space: flags exist only when their parent chose them.

`--model=linear` gets no `--hidden_units`/`--activation`; `--optimizer=sgd` gets `--momentum`
and, only for momentum 0.9, `--nesterov`; `--optimizer=adam` gets `--beta1`. The trainer keeps
argparse defaults for the flags a trial does not receive. Two metrics: accuracy (maximize) and
the parameter count (minimize), so the job has a Pareto front. numpy only, on a fixed XOR-like
dataset that a linear model cannot fit.
"""

import argparse

import hypertune
import numpy as np


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=["linear", "mlp"], default="linear")
    parser.add_argument("--hidden_units", type=int, default=16)
    parser.add_argument("--activation", choices=["relu", "tanh"], default="tanh")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--learning_rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument("--nesterov", choices=["true", "false"], default="false")
    parser.add_argument("--beta1", type=float, default=0.9)
    parser.add_argument("--epochs", type=int, default=15)
    return parser.parse_args(argv)


def make_data(n=1200, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2))
    y = ((x[:, 0] * x[:, 1]) > 0).astype(float)
    return x[:1000], y[:1000], x[1000:], y[1000:]


def init(args, rng):
    if args.model == "linear":
        return {"w": np.zeros((2, 1)), "b": np.zeros(1)}
    h = args.hidden_units
    return {"w1": rng.normal(0, 1, (2, h)), "b1": np.zeros(h),
            "w": rng.normal(0, 1 / np.sqrt(h), (h, 1)), "b": np.zeros(1)}


def forward(params, x, args):
    if args.model == "linear":
        return x, (x @ params["w"] + params["b"]).ravel()
    z = x @ params["w1"] + params["b1"]
    a = np.maximum(z, 0) if args.activation == "relu" else np.tanh(z)
    return a, (a @ params["w"] + params["b"]).ravel()


def gradients(params, x, y, args):
    hidden, logits = forward(params, x, args)
    d = (1 / (1 + np.exp(-logits)) - y)[:, None] / len(x)
    grads = {"w": hidden.T @ d, "b": d.sum(0)}
    if args.model == "mlp":
        back = d @ params["w"].T
        z = x @ params["w1"] + params["b1"]
        back = back * ((z > 0) if args.activation == "relu" else 1 - np.tanh(z) ** 2)
        grads.update(w1=x.T @ back, b1=back.sum(0))
    return grads


def main(argv=None):
    args = parse_args(argv)
    rng = np.random.default_rng(1)
    x, y, x_val, y_val = make_data()
    params = init(args, rng)
    state = {k: np.zeros_like(v) for k, v in params.items()}
    second = {k: np.zeros_like(v) for k, v in params.items()}
    n_params = sum(v.size for v in params.values())
    reporter = hypertune.HyperTune()
    step = 0
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x))
        for start in range(0, len(x), 50):
            idx = order[start:start + 50]
            step += 1
            for k, g in gradients(params, x[idx], y[idx], args).items():
                if args.optimizer == "sgd":
                    state[k] = args.momentum * state[k] + g
                    update = g + args.momentum * state[k] if args.nesterov == "true" else state[k]
                    params[k] -= args.learning_rate * update
                else:
                    state[k] = args.beta1 * state[k] + (1 - args.beta1) * g
                    second[k] = 0.999 * second[k] + 0.001 * g * g
                    m_hat = state[k] / (1 - args.beta1 ** step)
                    v_hat = second[k] / (1 - 0.999 ** step)
                    params[k] -= args.learning_rate * m_hat / (np.sqrt(v_hat) + 1e-8)
        accuracy = float(np.mean((forward(params, x_val, args)[1] > 0) == (y_val > 0.5)))
        print(f"epoch {epoch}: accuracy={accuracy:.4f} n_params={n_params}", flush=True)
        for tag, value in (("accuracy", accuracy), ("n_params", n_params)):
            reporter.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag=tag, metric_value=value, global_step=epoch)


if __name__ == "__main__":
    main()
