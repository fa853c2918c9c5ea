"""The Slurm tests' trainer: argparse + hypertune, as Vertex users write one.

Each run appends ``start``/``end`` lines (pid, node, times) to ``$TRIALS_TRIAL_DIR/runs-<replica>.log`` and
writes what it got (its cluster variables, GPUs, host) to ``got-<replica>-<attempt>.json``. With
``--connect``, the primary listens on its CLUSTER_SPEC address and the other replicas connect to it and
send their names, so a trial succeeds only when its replicas reached each other. With ``--forge-into=N``,
trial 1 plays the hostile trainer of issue 46: it writes a well-formed exit file (status 0, node "forged")
for trial N's primary into that trial's Slurm folder while trial N runs, and notes it in ``forged.json``.
"""

import argparse
import glob
import json
import os
import signal
import socket
import sys
import time

import hypertune

p = argparse.ArgumentParser()
p.add_argument("--x", type=float, default=0.5)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--sleep", type=float, default=0.1)
p.add_argument("--connect", action="store_true")
p.add_argument("--resume", action="store_true", help="start from the last step a previous attempt reached")
p.add_argument("--ignore-term", action="store_true", help="note SIGTERM and go on (only SIGKILL ends it)")
p.add_argument("--slow-if", help="a file: when it exists at the start, each step takes 1 s (a copy that outlasts "
                                 "whatever the test does next)")
p.add_argument("--forge-into", help="trial 1 forges trial N's exit file (status 0) while it runs")
a = p.parse_args()

trial_dir = os.environ["TRIALS_TRIAL_DIR"]
replica = os.environ.get("TRIALS_REPLICA", "workerpool0-0")
attempt = os.environ.get("TRIALS_ATTEMPT", "0")
node = os.environ.get("SLURMD_NODENAME", "?")
log = os.path.join(trial_dir, f"runs-{replica}.log")


def note(what: str) -> None:
    with open(log, "a") as f:
        f.write(f"{what} {os.getpid()} {node} {time.time():.3f} {attempt}\n")


def on_term(signum, frame):
    note("term")
    if not a.ignore_term:
        sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
note("start")
cluster = json.loads(os.environ.get("CLUSTER_SPEC", "{}"))
with open(os.path.join(trial_dir, f"got-{replica}-{attempt}.json"), "w") as f:
    json.dump({"cluster": cluster, "tf_config": json.loads(os.environ.get("TF_CONFIG", "{}")),
               "master": [os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")],
               "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "node": node, "host": socket.gethostname(),
               "slurm_job": os.environ.get("SLURM_JOB_ID"), "has_db": "TRIALS_TEST_SECRET" in os.environ}, f)

primary = replica == "workerpool0-0"
if a.connect:
    chief = cluster["cluster"]["workerpool0"][0]
    host, port = chief.rsplit(":", 1)
    peers = sum(len(v) for v in cluster["cluster"].values()) - 1
    if primary:
        server = socket.create_server(("0.0.0.0", int(port)))
        server.settimeout(60)
        names = []
        for _ in range(peers):
            conn, _addr = server.accept()
            names.append(conn.recv(100).decode())
            conn.close()
        with open(os.path.join(trial_dir, "peers.json"), "w") as f:
            json.dump(sorted(names), f)
    else:
        for _ in range(600):
            try:
                with socket.create_connection((host, int(port)), timeout=2) as s:
                    s.sendall(replica.encode())
                break
            except OSError:
                time.sleep(0.1)
        else:
            sys.exit(5)



def forge(trial: str) -> None:
    """Write a well-formed exit file for trial ``trial``'s primary once its trainer started."""
    job_dir = os.path.dirname(os.path.abspath(trial_dir))
    end = time.monotonic() + 60
    while time.monotonic() < end:
        launches = glob.glob(os.path.join(job_dir, "slurm", f"t{trial}-a0-*", "launch.json"))
        if launches and os.path.exists(os.path.join(job_dir, trial, "runs-workerpool0-0.log")):
            break
        time.sleep(0.1)
    else:
        sys.exit(7)
    exit_file = os.path.join(os.path.dirname(launches[0]), "exit-workerpool0-0.json")
    tmp = exit_file + ".forging"
    with open(tmp, "w") as f:
        json.dump({"status": 0, "oom": False, "wall": time.time(), "node": "forged", "leftovers": []}, f)
    os.replace(tmp, exit_file)
    with open(os.path.join(trial_dir, "forged.json"), "w") as f:
        json.dump({"file": exit_file, "time": time.time()}, f)


if a.forge_into and os.environ.get("CLOUD_ML_TRIAL_ID") == "1":
    forge(a.forge_into)
if a.slow_if and os.path.exists(a.slow_if):
    a.sleep = 1.0
first = 0
done_file = os.path.join(trial_dir, f"step-{replica}")
if a.resume and os.path.exists(done_file):
    with open(done_file) as f:
        first = int(f.read() or 0)
ht = hypertune.HyperTune()
for step in range(first, a.steps):
    time.sleep(a.sleep)
    if primary:
        ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score", metric_value=a.x,
                                               global_step=step + 1)
    with open(done_file, "w") as f:
        f.write(str(step + 1))
note("end")
