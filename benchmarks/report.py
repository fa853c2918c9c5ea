"""Benchmark results: machine facts, medians, printed tables and ``benchmarks/results/<part>.json``."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # PYTHONPATH of the commands timed
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
PYTHON = sys.executable


def installed_env(**extra: str) -> dict[str, str]:
    """The timed commands' environment: this checkout on the path and bytecode written once and
    reused beside the sources, as a pip-installed package has it whatever this shell says (this
    machine sets ``PYTHONDONTWRITEBYTECODE=1``: every timed start compiled trials' ~90 modules,
    0.1-0.15 s quiet). Compiles them now, and keeps their dataclass code, so no timed run pays it.
    (Not ``PYTHONPYCACHEPREFIX``: a fresh prefix has no bytecode of the installed packages either,
    and the first run that imports torch compiles it: seconds.)"""
    env = dict(os.environ, PYTHONPATH=REPO, **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if not _compiled:  # once a process: the modes' runs all share it
        subprocess.run([PYTHON, "-m", "compileall", "-q", os.path.join(REPO, "trials"),
                        os.path.join(REPO, "benchmarks")], env=env, check=False, stdout=subprocess.DEVNULL)
        # and trials' dataclass code kept, as after the trials command's first run (trials._dataclass_code)
        subprocess.run([PYTHON, "-c", _IMPORT_ALL], env=env, check=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        _compiled.append(True)
    return env


_IMPORT_ALL = """
import importlib, pkgutil, trials, trials.startup
trials.startup.install()  # (as the trials command does: its dataclass code is kept)
for m in pkgutil.walk_packages(trials.__path__, "trials."):
    if not m.name.endswith("__main__"):  # (commands, not modules)
        try:
            importlib.import_module(m.name)
        except Exception:  # a module of an extra that is not installed
            pass
"""


_compiled: list[bool] = []


def machine() -> dict[str, Any]:
    """What the numbers were measured on (CPU count and model, memory, Python, optuna)."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            mem_gib = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        from importlib.metadata import version

        optuna_version = version("optuna")
    except Exception:  # noqa: BLE001 - only a label
        optuna_version = "?"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "cpus": os.cpu_count(), "cpu_model": model, "memory_gib": mem_gib,
        "python": platform.python_version(), "platform": platform.platform(),
        "optuna": optuna_version, "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def median(values: Iterable[float]) -> float:
    data = [v for v in values if v is not None]
    return statistics.median(data) if data else float("nan")


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """(25th, 75th) percentile; for one value both are that value."""
    data = sorted(values)
    if len(data) < 2:
        return (data[0], data[0]) if data else (float("nan"), float("nan"))
    q = statistics.quantiles(data, n=4, method="inclusive")
    return q[0], q[2]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (the same text goes to the terminal and into the README)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    lines = [f"### {title}", "",
             "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for r in cells:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + " |")
    return "\n".join(lines) + "\n"


def _cell(v: Any) -> str:
    if isinstance(v, float):
        if v != v:
            return "n/a"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    return str(v)


def write_result(part: str, data: dict[str, Any], *, out_dir: str | None = None) -> str:
    """Write ``<out_dir>/<part>.json`` (default ``benchmarks/results``); returns the path."""
    out_dir = out_dir or RESULTS_DIR
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{part}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"part": part, "machine": machine(), **data}, f, indent=1, sort_keys=False, default=str)
        f.write("\n")
    return path


def worker_pool(workers: int):
    """A process pool of fresh interpreters with single-threaded BLAS (no oversubscribed cores)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # read by the spawned workers when they import numpy
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"
