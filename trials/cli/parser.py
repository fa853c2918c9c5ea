"""The ``trials`` argument parser: one subcommand a handler, and the option types they share."""

from __future__ import annotations

import argparse

from trials import protocol
from trials.cli.admin import _cmd_cancel, _cmd_check, _cmd_gc, _cmd_repair, _cmd_validate
from trials.cli.run import _cmd_resume, _cmd_serve, _cmd_sweep, _cmd_worker
from trials.cli.show import _cmd_best, _cmd_describe, _cmd_export, _cmd_list, _cmd_report


def _job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=protocol.DEFAULT_JOBS_ROOT,
                   help=f"directory holding one folder per job (default ./{protocol.DEFAULT_JOBS_ROOT})")
    p.add_argument("--storage", help="Optuna storage URL (default: journal file in the job folder)")


def _non_negative(text: str) -> float:
    """An argparse type: a finite number >= 0 (NaN, inf or a negative rate would hang or mislead)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--grace-period", type=_non_negative, metavar="SECONDS",
                   help="SIGTERM -> SIGKILL grace (default 10)")
    p.add_argument("--memory-limit", type=_positive_int, metavar="MB",
                   help="per-replica memory limit; over it the replica is OOM-killed")
    p.add_argument("--inject-restarts", type=_non_negative, metavar="RATE",
                   help="chaos mode: SIGTERM+restart replicas at RATE per trial-second")
    p.add_argument("--seed", type=int, help="sampler and chaos seed")
    p.add_argument("--echo", action="store_true",
                   help="echo every replica's output, prefixed, with control characters escaped")
    p.add_argument("--quiet", action="store_true", help="print only warnings and the summary's exit code")
    p.add_argument("--keep-going", action="store_true",
                   help="run every trial even when the first 3 are infeasible for the same reason (kept by the job)")
    p.add_argument("--json-logs", action="store_true", help="one JSON object per event")
    p.add_argument("--warm-start", action="store_true",
                   help="host runtime: fork each `python SCRIPT`/`python -m MODULE` trial from a launcher that "
                        "already imported what the first trial loaded (in the same sandbox; the default, as on "
                        "Vertex, is a fresh process); check it first with trials check --warm-start")
    p.add_argument("--gpus", metavar="IDS",
                   help="GPUs to hand out, e.g. 0,1,2 (default: CUDA_VISIBLE_DEVICES when set, as a scheduler "
                        "sets it for its allocation, else nvidia-smi -L)")
    p.add_argument("--ignore-accelerators", action="store_true",
                   help="run a spec that asks for accelerators on CPU (CUDA_VISIBLE_DEVICES='')")
    p.add_argument("--stale-after", type=float, metavar="SECONDS",
                   help="database jobs: a trial whose worker missed heartbeats this long is re-run (default 30)")
    p.add_argument("--runtime", metavar="NAME",
                   help="where replicas run: host (processes, the default), podman or docker (each replica a "
                        "container of its pool's image, as on Vertex), container (podman where both exist), "
                        "slurm (each trial attempt a Slurm job); kept by the job")
    p.add_argument("--partition", metavar="NAME", help="with --runtime slurm: the partition (default: the "
                   "cluster's); kept by the job")
    p.add_argument("--slurm-arg", action="append", default=[], metavar="OPTION",
                   help="with --runtime slurm: one more sbatch option for every trial, e.g. --qos=high "
                        "(repeatable, kept by the job)")
    p.add_argument("--image", action="append", default=[], metavar="URI=LOCAL",
                   help="with a container runtime: run the local image LOCAL where the spec names URI "
                        "(the exported job keeps URI); repeatable, kept by the job")
    _pass_env_arg(p)


def _env_name(text: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise argparse.ArgumentTypeError(f"expected an environment variable name, got {text!r}")
    return text


def _pass_env_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pass-env", action="append", default=[], type=_env_name, metavar="NAME",
                   help="pass this host variable to the trials although it is withheld "
                        "(GOOGLE_*, CLOUDSDK_*, AWS_*, ...; repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trials",
        description="Run Vertex AI HyperparameterTuningJobs offline.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("validate", help="check a spec and print what a trial would get")
    p.add_argument("spec", help="gcloud YAML, REST JSON, legacy hptuning_config.yaml or search space")
    _pass_env_arg(p)
    p.add_argument("--trainer", nargs="?", const="", metavar="TARGET",
                   help="check every parameter, type, range and choice against a trials.main/trials-run "
                        "trainer (any other: every flag against its argparse --help): module:function or "
                        "file.py[:function], or (no TARGET) the command after -- or the spec's")
    p.add_argument("--runtime", metavar="NAME", help="show what a trial gets under this runtime: host (the default), "
                   "podman, docker or container (each replica a container of its pool's image)")
    p.add_argument("--image", action="append", default=[], metavar="URI=LOCAL",
                   help="with a container runtime: the local image that stands in for the spec's URI")
    p.set_defaults(handler=_cmd_validate)

    p = sub.add_parser("export", help="write a spec or a job's spec as gcloud YAML or REST JSON")
    p.add_argument("spec", metavar="JOB|SPEC", help="a spec file, or the id of a job under --root / in --storage")
    _job_args(p)
    p.add_argument("--format", choices=("gcloud-yaml", "rest-json"), default="gcloud-yaml")
    p.add_argument("--image-uri", help="container image for every pool (containerSpec.imageUri, "
                   "pythonPackageSpec.executorImageUri)")
    p.add_argument("--base-output-dir", metavar="gs://BUCKET/PATH",
                   help="baseOutputDirectory of the exported job (a local one is refused)")
    p.add_argument("--draft", action="store_true",
                   help="write the job even when Vertex would reject it (no image, local paths)")
    p.add_argument("--with-local-command", action="store_true",
                   help="put the command the job ran with (after --) in every pool's containerSpec.command: on "
                        "Vertex it replaces the image's ENTRYPOINT (without it, the ENTRYPOINT runs)")
    p.set_defaults(handler=_cmd_export)

    p = sub.add_parser("sweep", help="run a tuning job locally",
                       usage="trials sweep SPEC [options] [-- LOCAL COMMAND...]")
    p.add_argument("spec")
    _job_args(p)
    p.add_argument("--job-id")
    p.add_argument("--max-trial-count", type=int)
    p.add_argument("--parallel-trial-count", type=int)
    p.add_argument("--max-failed-trial-count", type=int)
    p.add_argument("--algorithm", choices=("ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"))
    p.add_argument("--sampler", metavar="NAME",
                   help="local only, for ALGORITHM_UNSPECIFIED: gp-warped | gp | tpe | cmaes | random | vizier "
                   "instead of the default rule's choice; vizier is OSS Vizier's default designer, Vertex's own "
                   "algorithm, seconds per trial (kept on resume; not part of an exported job)")
    p.add_argument("--base-output-dir")
    p.add_argument("--gcs-root", help="local directory standing in for /gcs (default: <job>/gcs)")
    p.add_argument("--project-number",
                   help=f"CLOUD_ML_PROJECT_ID given to trials (default {protocol.DEFAULT_PROJECT_NUMBER})")
    p.add_argument("--no-trainer-check", action="store_true",
                   help="do not ask a trials.main/trials-run trainer to check the spec's flags first")
    _run_args(p)
    p.set_defaults(handler=_cmd_sweep)

    p = sub.add_parser("resume", help="continue a job (after a crash or cancel), or add trials")
    p.add_argument("job")
    _job_args(p)
    p.add_argument("--max-trial-count", type=int, help="new total number of trials")
    p.add_argument("--max-failed-trial-count", type=int,
                   help="new maxFailedTrialCount (a FAILED job runs on with a higher one)")
    p.add_argument("--parallel-trial-count", type=int, help="new parallelTrialCount")
    _run_args(p)
    p.set_defaults(handler=_cmd_resume)

    p = sub.add_parser("check", help="run a trainer for real and score it against Vertex's rules",
                       usage="trials check SPEC [options] [-- COMMAND ...]")
    p.add_argument("spec")
    p.add_argument("--params", action="append", default=[], metavar="NAME=VALUE",
                   help="parameter values (default: the spec's first values; repeatable, or comma-separated)")
    p.add_argument("--time-limit", type=float, default=180.0, metavar="SECONDS",
                   help="time box for all the runs (default 180)")
    p.add_argument("--grace-period", type=_non_negative, default=10.0, metavar="SECONDS",
                   help="how long a replica may take to exit after SIGTERM (default 10)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--strict", action="store_true",
                   help="fail, not warn, when the trainer does not resume after a restart or handle SIGTERM "
                        "(Vertex recommends both; a trainer that checkpoints and starts over fails either way)")
    p.add_argument("--warm-start", action="store_true",
                   help="also say whether the trainer is safe to run with trials sweep --warm-start: the same "
                        "trial run fresh, then twice forked from a warm launcher, must report the same values "
                        "(3 more runs)")
    p.add_argument("--keep", metavar="DIR", help="keep the runs' folders (logs, outputs) in DIR")
    p.add_argument("--base-output-dir", metavar="DIR",
                   help="run as with a baseOutputDirectory (AIP_* set), as `trials sweep --base-output-dir` does; "
                        "the runs write into their own folders")
    p.add_argument("--runtime", metavar="NAME", help="host (the default), podman, docker or container: run the "
                   "probes as containers of the pools' images, as `trials sweep --runtime` does")
    p.add_argument("--image", action="append", default=[], metavar="URI=LOCAL",
                   help="with a container runtime: the local image that stands in for the spec's URI")
    _pass_env_arg(p)
    p.set_defaults(handler=_cmd_check)

    p = sub.add_parser("worker", help="join a job in a database and run its trials until it is done",
                       usage="trials worker JOB --storage URL [--parallel-trial-count N] [options]")
    p.add_argument("job")
    p.add_argument("--storage", help="the job's database URL, e.g. postgresql://user@host/db")
    p.add_argument("--root", help="this host's folder for trial logs (default: the job's folder)")
    p.add_argument("--parallel-trial-count", type=int, dest="slots", metavar="N",
                   help="at most N trials on this worker (the job's parallelTrialCount caps all workers)")
    _run_args(p)
    p.set_defaults(handler=_cmd_worker)

    p = sub.add_parser("describe", help="print a job (Vertex REST shape with --format json)")
    p.add_argument("job")
    _job_args(p)
    p.add_argument("--format", choices=("table", "json", "csv", "local-json"), default="table",
                   help="json: the v1 HyperparameterTuningJob resource, exactly; local-json: what "
                   "only the local run knows (attempts, exit statuses, stop reasons, folders)")
    p.set_defaults(handler=_cmd_describe)

    p = sub.add_parser("list", help="list jobs")
    _job_args(p)
    p.set_defaults(handler=_cmd_list)

    p = sub.add_parser("cancel", help="cancel a running job")
    p.add_argument("job")
    _job_args(p)
    p.set_defaults(handler=_cmd_cancel)

    p = sub.add_parser("repair", help="rewrite a job's journal with every readable record; say what was dropped")
    p.add_argument("job")
    p.add_argument("--root", default=protocol.DEFAULT_JOBS_ROOT,
                   help=f"directory holding one folder per job (default ./{protocol.DEFAULT_JOBS_ROOT})")
    p.set_defaults(handler=_cmd_repair)

    p = sub.add_parser("gc", help="remove the sandbox layers a job's failed attempts kept for debugging "
                                  "(describe --format local-json names them)")
    p.add_argument("job")
    _job_args(p)
    p.set_defaults(handler=_cmd_gc)

    p = sub.add_parser("best", help="the best trial's flags and model directory")
    p.add_argument("job")
    _job_args(p)
    p.add_argument("--format", choices=["text", "json"], default="text",
                   help="json: exact values, parameters, flags and model folder of each best trial")
    p.set_defaults(handler=_cmd_best)

    p = sub.add_parser("report", help="write an HTML report with plots into the job folder")
    p.add_argument("job")
    _job_args(p)
    p.add_argument("--out", metavar="DIR", help="where to write index.html and the PNGs (default <job folder>/report)")
    p.add_argument("--no-plots", action="store_true", help="tables only, no matplotlib")
    p.set_defaults(handler=_cmd_report)

    p = sub.add_parser("serve", help="serve Vertex AI's v1 JobService REST API on localhost, for the aiplatform SDK",
                       description="Serve Vertex AI's v1 JobService REST API (HyperparameterTuningJobs, CustomJobs) "
                                   "on localhost: each job created through it runs as `trials resume JOB` would run "
                                   "it, with the job options below.")
    g = p.add_argument_group("where jobs live")
    g.add_argument("--root", default=protocol.DEFAULT_JOBS_ROOT,
                   help=f"directory holding one folder per job, and the buckets (ROOT/gcs) "
                        f"(default ./{protocol.DEFAULT_JOBS_ROOT})")
    g.add_argument("--storage", help="Optuna storage URL (default: journal file in the job folder)")
    g = p.add_argument_group("the server")
    g.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080; 0 picks a free one)")
    g.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; requests to another Host name are refused)")
    g.add_argument("--token", metavar="TOKEN",
                   help="the bearer token every request must carry (default: $TRIALS_SERVE_TOKEN, else a random "
                        "one; either way printed and kept in ROOT/serve.token, mode 0600); a --token is "
                        "visible to other accounts in ps, the variable is not")
    g.add_argument("--no-auth", action="store_true",
                   help="answer requests without a token: anyone who reaches the port runs commands as you")
    g.add_argument("--quiet", action="store_true", help="print only where it serves")
    g = p.add_argument_group("every job it runs", "as `trials sweep` takes them, given to each job's controller")
    g.add_argument("--runtime", metavar="NAME",
                   help="where replicas run: host (processes, the default), podman or docker (each replica a "
                        "container of its pool's image), container (podman where both exist), slurm")
    g.add_argument("--image", action="append", default=[], metavar="URI=LOCAL",
                   help="with a container runtime: run the local image LOCAL where a job names URI "
                        "(repeatable; a job gets the entries its pools name)")
    g.add_argument("--gpus", metavar="IDS",
                   help="GPUs to hand out, e.g. 0,1 (default: CUDA_VISIBLE_DEVICES when set, else nvidia-smi -L): "
                        "each running job hands them to its own trials (jobs running at once may share one; "
                        "--max-running-jobs 1 avoids it); a job asking for more per trial is refused at its "
                        "create (429)")
    g.add_argument("--ignore-accelerators", action="store_true",
                   help="run every job on CPU whatever accelerators its machineSpec asks for "
                        "(CUDA_VISIBLE_DEVICES='')")
    g.add_argument("--memory-limit", type=_positive_int, metavar="MB",
                   help="per-replica memory limit; over it the replica is OOM-killed (the trial fails as on Vertex)")
    g.add_argument("--warm-start", action="store_true",
                   help="host runtime: fork each job's `python SCRIPT`/`python -m MODULE` trials from a launcher "
                        "that already imported what its first trial loaded (default, as on Vertex: a fresh "
                        "process); check a trainer first with trials check --warm-start")
    g.add_argument("--max-running-jobs", type=_positive_int, metavar="N",
                   help="jobs run at once (default: the machine's cores); the others wait JOB_STATE_QUEUED "
                        "and start in creation order")
    g.add_argument("--project-number", metavar="N", help="what trials get as CLOUD_ML_PROJECT_ID")
    p.set_defaults(handler=_cmd_serve)

    return parser


def _version() -> str:
    from trials import __version__

    return f"trials {__version__}"
