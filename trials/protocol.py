"""Everything related to naming: env vars, exit codes, trial-dir files, flag and value formats.

Both sides of the trial contract (the runtime inside the trial and the controller that starts it)
import their names from here, so the contract is written down exactly once.
"""

from __future__ import annotations

import math
import os
import re

# --- Environment variables set by Vertex AI (and by the local controller) -------------------------
ENV_TRIAL_ID = "CLOUD_ML_TRIAL_ID"
ENV_JOB_ID = "CLOUD_ML_JOB_ID"
ENV_PROJECT_ID = "CLOUD_ML_PROJECT_ID"  # holds the project *number*, never inferred
ENV_METRIC_FILE = "CLOUD_ML_HP_METRIC_FILE"
ENV_CLUSTER_SPEC = "CLUSTER_SPEC"
ENV_TF_CONFIG = "TF_CONFIG"
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_RANK = "RANK"
ENV_MODEL_DIR = "AIP_MODEL_DIR"
ENV_CHECKPOINT_DIR = "AIP_CHECKPOINT_DIR"
ENV_TENSORBOARD_LOG_DIR = "AIP_TENSORBOARD_LOG_DIR"

VERTEX_ENV_VARS = (
    ENV_TRIAL_ID, ENV_JOB_ID, ENV_PROJECT_ID, ENV_METRIC_FILE, ENV_CLUSTER_SPEC, ENV_TF_CONFIG,
    ENV_MASTER_ADDR, ENV_MASTER_PORT, ENV_WORLD_SIZE, ENV_RANK, ENV_MODEL_DIR, ENV_CHECKPOINT_DIR,
    ENV_TENSORBOARD_LOG_DIR, "CLOUD_ML_REGION", "CLOUD_ML_HP_METRIC_TAG",
)

# --- The project's own environment variables (prefixed TRIALS_) ---------------------------------
ENV_TRIAL_DIR = "TRIALS_TRIAL_DIR"  # where the runtime writes metrics.jsonl (set by the controller)
ENV_GCS_ROOT = "TRIALS_GCS_ROOT"  # local directory standing in for the /gcs FUSE mount
ENV_STOP_FILE = "TRIALS_STOP_FILE"  # a stop request: the runtime stops when this file exists
ENV_REPLICA = "TRIALS_REPLICA"  # e.g. "workerpool0-0"
ENV_ATTEMPT = "TRIALS_ATTEMPT"  # 0 for the first start of a replica, +1 per restart
ENV_LOG_FORMAT = "TRIALS_LOG_FORMAT"  # "json" or "text"; default: text on a terminal, JSON otherwise
ENV_GCS_EMULATOR = "TRIALS_GCS_EMULATOR"  # "off": no local Cloud Storage endpoint even with trials[gcs]
ENV_STORAGE_EMULATOR_HOST = "STORAGE_EMULATOR_HOST"  # google-cloud-storage's endpoint override
ENV_SUGGEST = "TRIALS_SUGGEST"  # "inline": a model-based sampler suggests in the job loop, not ahead of time
ENV_SANDBOX = "TRIALS_SANDBOX"  # "off": replicas run as plain children, without their container view
ENV_OUTAGE_TIMEOUT = "TRIALS_OUTAGE_TIMEOUT"  # seconds a database outage may last before a worker gives up
ENV_CGROUP = "TRIALS_CGROUP"  # "off": no cgroup per replica; orphans are found through the subreaper instead
ENV_OUTPUT_ROOT = "TRIALS_OUTPUT_ROOT"  # outside a tuning job: where local runs write (default ./trials-output)
ENV_SERVE_TOKEN = "TRIALS_SERVE_TOKEN"  # `trials serve`'s token, fixed (as --token, unseen in ps); never passed on
# "off": `trials resume` of a job with nothing to run opens it with Optuna and runs its loop (cli.run._resume_ended)
ENV_RESUME_FAST = "TRIALS_RESUME_FAST"
OFF_VALUES = ("off", "0", "no", "false")  # what turns one of the variables above off
# Tests only: a path; a worker's first claim whose commit succeeds creates it and then fails as if the
# connection had dropped before the answer came (the commit reached the server, the client never knew)
ENV_TEST_LOSE_CLAIM_ANSWER = "TRIALS_TEST_LOSE_CLAIM_ANSWER"
# `trials validate --trainer` / the sweep's pre-flight: the trainer, run with --help, checks this spec
# against its own flags and writes {"problems": [...], "n_values": N} as JSON to the _OUT file
ENV_CHECK_SPEC = "TRIALS_CHECK_SPEC"
ENV_CHECK_OUT = "TRIALS_CHECK_OUT"

PROJECT_ENV_VARS = (
    ENV_TRIAL_DIR, ENV_GCS_ROOT, ENV_STOP_FILE, ENV_REPLICA, ENV_ATTEMPT, ENV_LOG_FORMAT,
    ENV_OUTPUT_ROOT, ENV_CHECK_SPEC, ENV_CHECK_OUT, ENV_SANDBOX, ENV_GCS_EMULATOR, ENV_CGROUP,
    ENV_OUTAGE_TIMEOUT,
)

# --- What a trial's environment keeps of the host's (issue 13.1) ---------------------------------
# A Vertex container never sees the submitting user's cloud identity: the job's service account is
# its only credential, and its project comes from CLOUD_ML_PROJECT_ID. These host variables are
# withheld from every replica unless passed on purpose with `--pass-env NAME`.
WITHHELD_ENV_PREFIXES = (
    "GOOGLE_",  # GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_CLOUD_PROJECT, GOOGLE_CLOUD_QUOTA_PROJECT, ...
    "CLOUDSDK_",  # gcloud's configuration: CLOUDSDK_CORE_PROJECT, CLOUDSDK_CONFIG, ...
    "GCLOUD_",  # GCLOUD_PROJECT (older client libraries)
    "GCE_",  # GCE_METADATA_HOST, GCE_METADATA_IP: a metadata server that hands out tokens
    "GCP_",  # GCP_PROJECT (Cloud Functions style)
    "DEVSHELL_",  # Cloud Shell's project and credential hand-off
    "AWS_",  # another cloud's identity: AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE
    "AZURE_",
    "BOTO_",  # BOTO_CONFIG, BOTO_PATH: gsutil/boto credential files
)
WITHHELD_ENV_NAMES = (
    "STORAGE_EMULATOR_HOST",  # the host's own emulator; trials sets its own with the gcs extra
    "KUBECONFIG",
    "SSH_AUTH_SOCK",  # an SSH agent: the user's git and server identity
    "GH_TOKEN", "GITHUB_TOKEN",
)
# Kept as they are (the toolchain a local "image" needs, where a container would have its image's own);
# everything not withheld is kept too: these are listed for the docs (docs/VERTEX_EMULATION.md, "The
# trial's environment", which a test compares with these lists). CLOUD_SDK_VERSION is the version of
# the gcloud on PATH (google/cloud-sdk images set it): part of the local image, not an identity.
TOOLCHAIN_ENV_NAMES = (
    "PATH", "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
    "TERM", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME", "CLOUD_SDK_VERSION",
)
TOOLCHAIN_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "XLA_", "TF_CPP_", "OMP_", "MKL_")


# Trust settings, not identity: a CA bundle for a TLS-inspecting proxy is kept, whatever its prefix
# (AWS_CA_BUNDLE, CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE): without it a trainer on such a network reaches nothing.
TRUST_ENV_MARKERS = ("CA_BUNDLE", "CA_CERTS", "CA_CERT_FILE")


def is_withheld_env(name: str) -> bool:
    """Whether a host variable is part of the user's cloud identity (withheld from trials)."""
    if any(marker in name for marker in TRUST_ENV_MARKERS):
        return False
    return name in WITHHELD_ENV_NAMES or name.startswith(WITHHELD_ENV_PREFIXES)


# --- Exit codes ------------------------------------------------------------------------------------
EXIT_OK = 0
EXIT_ERROR = 1  # an exception in the objective: a permanent failure
EXIT_USAGE = 2  # bad flags, bad spec: a permanent failure
EXIT_STOPPED = 75  # stopped on request (SIGTERM or a stop file): step finished, checkpoint written
EXIT_INTERRUPTED = 130  # Ctrl-C on the CLI

DEFAULT_PROJECT_NUMBER = "000000000000"  # CLOUD_ML_PROJECT_ID of local jobs (--project-number sets another)
REPLICA_PORT = 2222  # the port in CLUSTER_SPEC/TF_CONFIG of a one-replica trial, as on Vertex
DEFAULT_JOBS_ROOT = "trials-jobs"  # where job folders go without --root (relative to the current folder)

# --- Files in a trial directory -------------------------------------------------------------------
METRICS_LOG = "metrics.jsonl"  # the runtime's lossless log of every report
HYPERTUNE_FILE = "hypertune.metrics"  # CLOUD_ML_HP_METRIC_FILE of the primary replica
# The largest step a storage keeps: Optuna's RDB schema stores a step as a 32-bit INTEGER, so every
# storage refuses larger ones alike (a journal and PostgreSQL hold the same measurements).
MAX_STEP = 2**31 - 1
# Keys cloudml-hypertune writes beside the metric tags of each line: a metric cannot be named so.
HYPERTUNE_RESERVED_KEYS = frozenset({"checkpoint_path", "global_step", "timestamp", "trial"})
ARGS_FILE = "args.json"
ENV_FILE = "env.json"
STOP_FILE = "STOP"
PIDS_FILE = "pids.json"  # every replica group the controller started for the trial (reaped on resume)
SANDBOX_DIR = "sandbox"  # <replica>.<n>/upper: what a sandboxed replica wrote in its launch folder
CHECKPOINT_PREFIX = "ckpt-"
# checkpoint formats by name -> file suffix (``ckpt-<step:08d><suffix>``); "auto" picks one by the state
CHECKPOINT_FORMATS = {"json": ".json", "npz": ".npz", "torch": ".pt", "pickle": ".pkl"}
CHECKPOINT_AUTO = "auto"


def replica_name(pool_index: int, replica_index: int) -> str:
    """The replica name Vertex uses in messages and log labels, e.g. ``workerpool0-0``."""
    return f"workerpool{pool_index}-{replica_index}"


def stdout_log(replica: str) -> str:
    return f"{replica}.stdout.log"


def stderr_log(replica: str) -> str:
    return f"{replica}.stderr.log"


def metric_file_name(replica: str) -> str:
    """Each replica gets its own hypertune file so replicas never race on one path."""
    return HYPERTUNE_FILE if replica == replica_name(0, 0) else f"{replica}.{HYPERTUNE_FILE}"


# --- Values and flags -----------------------------------------------------------------------------
def format_value(value: object) -> str:
    """Format a parameter value as a trial flag value.

    Integral numbers print as ``64`` (never ``64.0``) so ``argparse`` ``type=int`` accepts them;
    other floats print with ``repr`` (``1e-05``); strings are passed through unchanged.
    """
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
            return str(int(value))
        return repr(value)
    return str(value)


def format_flag(name: str, value: object) -> str:
    """One argv token ``--<name>=<value>``; the value is never split or shell-interpreted."""
    return f"--{name}={format_value(value)}"


# --- gs:// paths ---------------------------------------------------------------------------------
GCS_MOUNT = "/gcs"
_GS_URI = re.compile(r"^gs://([^/]+)(/.*)?$")


def is_gcs_uri(path: str) -> bool:
    return path.startswith("gs://")


def local_path(path: str, gcs_root: str | None = None) -> str:
    """Map ``gs://BUCKET/x`` to ``<gcs_root>/BUCKET/x`` as the Cloud Storage FUSE mount does.

    ``gcs_root`` defaults to ``$TRIALS_GCS_ROOT`` and then to ``/gcs`` (Vertex's mount point).
    Anything that is not a ``gs://`` URI is returned unchanged. This is the only function in the
    project that parses ``gs://``.

    Raises:
        ValueError: the URI has no bucket, or a ``..`` segment that would leave the root.
    """
    if not is_gcs_uri(path):
        return path
    match = _GS_URI.match(path)
    if match is None:
        raise ValueError(f"expected gs://BUCKET/path, got {path!r}")
    bucket, rest = match.group(1), (match.group(2) or "/")
    if bucket in (".", "..") or any(part == ".." for part in rest.split("/")):
        raise ValueError(f"a gs:// path may not contain '..', got {path!r}")
    root = gcs_root or os.environ.get(ENV_GCS_ROOT) or GCS_MOUNT
    local = os.path.join(root, bucket) + rest
    return local


# --- Identifiers ----------------------------------------------------------------------------------
JOB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_job_id(job_id: str) -> str:
    """Job ids become directory names: letters, digits, ``_ . -``, no leading dot, ≤ 128 chars."""
    if not JOB_ID_PATTERN.fullmatch(job_id) or job_id in (".", ".."):  # `$` would allow "x\n"
        raise ValueError(
            f"a job id must be 1-128 letters, digits, '_', '.', '-' starting with a letter or "
            f"digit, got {job_id!r}"
        )
    return job_id
