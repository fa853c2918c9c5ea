"""The test image's ENTRYPOINT: argparse + hypertune, as Vertex users write trainers.

--mode: normal (reports --epochs steps, saves a model), ignore-term (SIGTERM ignored, sleeps), term
(handles SIGTERM: exits 0 at once), oom (allocates until the memory limit kills it), sleep (reports
once, then sleeps --sleep seconds), probe (what it reaches: the loopback ports --probe, as a PostgreSQL
client would start, and the storage endpoint of STORAGE_EMULATOR_HOST; one line "probe: {json}").
"""

import argparse
import json
import os
import signal
import sys
import time

import hypertune
import onlyhere

p = argparse.ArgumentParser()
p.add_argument("--x", type=float, required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--mode", default="normal")
p.add_argument("--sleep", type=float, default=60.0)
p.add_argument("--probe", type=int, action="append", default=[])
a = p.parse_args()
ht = hypertune.HyperTune()
if a.mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif a.mode == "term":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if a.mode == "handshake":  # a 2-pool trial: the chief listens at its CLUSTER_SPEC address, the worker calls it
    import socket

    spec = json.loads(os.environ["CLUSTER_SPEC"])
    host, port = spec["cluster"]["workerpool0"][0].rsplit(":", 1)
    if spec["task"]["type"] == "workerpool0":
        with socket.create_server((host, int(port))) as server:
            server.settimeout(60)
            conn, _ = server.accept()
            with conn:
                got = conn.recv(64).decode()
        ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score", metric_value=float(got),
                                               global_step=1)
    else:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection((host, int(port)), timeout=5) as conn:
                    conn.sendall(str(a.x + onlyhere.OFFSET).encode())
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    sys.exit(0)
if a.mode == "gcs":  # the job's local Cloud Storage endpoint, reached from the container (JSON API, no client)
    import urllib.request

    with urllib.request.urlopen(os.environ["STORAGE_EMULATOR_HOST"] + "/storage/v1/b/bucket/o", timeout=30) as r:
        names = [item["name"] for item in json.load(r).get("items", [])]
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score", metric_value=float(len(names)),
                                           global_step=1)
    print("objects:", " ".join(sorted(names)))
    sys.exit(0)
if a.mode == "probe":
    import socket
    import struct
    import urllib.request

    seen = {}
    for port in a.probe:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                body = struct.pack("!I", 196608) + b"user\0postgres\0database\0postgres\0\0"  # StartupMessage 3.0
                conn.sendall(struct.pack("!I", len(body) + 4) + body)
                conn.settimeout(10)
                try:
                    seen[str(port)] = "connected, answered " + repr(conn.recv(1))
                except OSError:
                    seen[str(port)] = "connected"
        except OSError as err:
            seen[str(port)] = "not reached: " + type(err).__name__
    endpoint = os.environ.get("STORAGE_EMULATOR_HOST", "")
    try:
        with urllib.request.urlopen(endpoint + "/storage/v1/b/bucket/o", timeout=30) as r:
            listed = sorted(item["name"] for item in json.load(r).get("items", []))
    except (OSError, ValueError) as err:
        listed = ["error: " + type(err).__name__]
    print("probe: " + json.dumps({"ports": seen, "endpoint": endpoint, "objects": listed}), flush=True)
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score", metric_value=float(len(listed)),
                                           global_step=1)
    sys.exit(0)
if a.mode == "oom":
    hog = []
    while True:
        hog.append(bytearray(16 << 20))
for step in range(1, a.epochs + 1):
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score",
                                           metric_value=a.x * step + onlyhere.OFFSET, global_step=step)
    time.sleep(0.05)
if a.mode in ("sleep", "ignore-term", "term"):
    time.sleep(a.sleep)
model = os.environ.get("AIP_MODEL_DIR")
if model:
    path = model.replace("gs://", "/gcs/", 1)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.json"), "w") as f:
        json.dump({"x": a.x, "python": sys.version, "executable": sys.executable, "cwd": os.getcwd(),
                   "argv": sys.argv[1:], "env": dict(os.environ)}, f)
