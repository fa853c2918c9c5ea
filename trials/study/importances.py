"""Parameter importances of a job's completed trials (Optuna's fANOVA), keyed by parameterId."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import random
import warnings
from collections.abc import Collection, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from trials import files
from trials.study.names import parameter_id_of

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

# Optuna's fANOVA defaults (64 trees, depth 64) cost ~1 ms of pure Python per tree and trial here
# (a 1,000-trial report spent 30 s of its 64 in them): the report's forest is smaller, on a sample
MAX_TRIALS = 200  # more completed trials than this: a random sample of them (seeded: the same each time)
N_TREES = 16
MAX_DEPTH = 8


def param_importances(trials: Sequence[Any], *, directions: Sequence[bool], metric_index: int = 0,
                      leave_out: Collection[int] = (), max_trials: int = MAX_TRIALS,
                      cache_path: str | None = None) -> tuple[dict[str, float], int, int]:
    """Importance of each parameter for one metric, over the COMPLETE trials not in ``leave_out``
    (at most ``max_trials`` of them, a seeded random sample: see ``sample``), by fANOVA with
    ``N_TREES`` trees of depth at most ``MAX_DEPTH``.

    Args:
        trials: the job's trials (Optuna's ``FrozenTrial`` or the journal's ``StoredTrial``, whose
            distributions are Optuna's JSON), read only.
        directions: per metric, whether it is maximized.
        metric_index: which of the trials' values.
        leave_out: trial numbers (Optuna's, from 0) whose value is not a result (stopped early).
        cache_path: a file keeping the last result with the digest of everything it is computed
            from (the sampled trials' parameters, distributions and values, the directions, the
            forest's settings, Optuna's and scikit-learn's versions): the same inputs give it back
            without importing either (seconds of a report), other inputs compute it anew.

    Returns:
        ``{parameterId: importance}``, summing the Optuna names one parameterId may have
        (``id#2`` for a conditional branch, ``id:reverse_log``), empty when no parameter is shared;
        the number of trials it is computed over, and of those it could have been.
    """
    complete = [t for t in trials if t.state.name == "COMPLETE" and t.number not in leave_out]
    kept = sample(complete, max_trials)
    key = _digest(kept, directions, metric_index) if cache_path else ""
    if cache_path:
        cached = _read_cache(cache_path, key)
        if cached is not None:
            return cached, len(kept), len(complete)
    out = _fanova(kept, directions, metric_index)
    if cache_path:
        with contextlib.suppress(OSError):  # a folder this process cannot write: computed each time
            files.write_text_atomic(cache_path, json.dumps({"key": key, "values": out}))
    return out, len(kept), len(complete)


def _fanova(kept: Sequence[Any], directions: Sequence[bool], metric_index: int) -> dict[str, float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created in memory" under `trials report`
    view = optuna.create_study(directions=["maximize" if m else "minimize" for m in directions])  # in memory
    view.add_trials([optuna.trial.create_trial(params=t.params, distributions=_distributions(t.distributions),
                                               values=t.values) for t in kept])
    maximize = directions[metric_index]
    sign = -1.0 if maximize else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = optuna.importance.get_param_importances(
            view, evaluator=optuna.importance.FanovaImportanceEvaluator(
                n_trees=N_TREES, max_depth=MAX_DEPTH, seed=0),
            target=lambda t: sign * t.values[metric_index])
    out: dict[str, float] = {}
    for name, value in raw.items():
        pid = parameter_id_of(name)
        out[pid] = out.get(pid, 0.0) + float(value)
    return out


def _digest(kept: Sequence[Any], directions: Sequence[bool], metric_index: int) -> str:
    """What the importances are a function of, hashed (the floats exactly: JSON writes their repr)."""
    versions: list[str | None] = []
    for dist in ("optuna", "scikit-learn"):
        try:
            versions.append(metadata.version(dist))
        except metadata.PackageNotFoundError:
            versions.append(None)
    data = [[sorted(t.params.items()), sorted((k, _json(d)) for k, d in t.distributions.items()), list(t.values)]
            for t in kept]
    text = json.dumps([1, versions, N_TREES, MAX_DEPTH, list(directions), metric_index, data], default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _json(d: Any) -> str:
    if isinstance(d, str):
        return d
    from optuna.distributions import distribution_to_json

    return distribution_to_json(d)


def _read_cache(path: str, key: str) -> dict[str, float] | None:
    """The cached importances when they are of ``key``; else None (missing, foreign, another input)."""
    try:
        with open(path, "rb") as f:
            d = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return None
    values = d.get("values") if isinstance(d, dict) and d.get("key") == key else None
    if not (isinstance(values, dict)
            and all(isinstance(k, str) and type(v) is float for k, v in values.items())):
        return None
    return values


def sample(kept: Sequence[Any], max_trials: int) -> list[Any]:
    """``kept`` when it has at most ``max_trials``, else that many of them at random (seed 0, in
    their order): the same job gives the same sample, so the same importances, each time."""
    if len(kept) <= max_trials:
        return list(kept)
    chosen = sorted(random.Random(0).sample(range(len(kept)), max_trials))
    return [kept[i] for i in chosen]


@functools.lru_cache(maxsize=256)
def _from_json(text: str) -> BaseDistribution:
    from optuna.distributions import json_to_distribution

    return json_to_distribution(text)


def _distributions(d: Mapping[str, Any]) -> dict[str, BaseDistribution]:
    return {k: _from_json(v) if isinstance(v, str) else v for k, v in d.items()}
