"""Every Optuna internal the adapter uses (``trials.study.optuna_internals``), touched against the installed
Optuna: one test per internal, whose failure names the one that moved or changed shape."""

from __future__ import annotations

import ast
import enum
import importlib.util
import json
import re
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState
from sqlalchemy import inspect as sa_inspect
from sqlalchemy import text

from trials.study import optuna_internals as internals
from trials.study import replay

OPTUNA = f"optuna {optuna.__version__}"
ADAPTER = Path(internals.__file__).parent
SPACE = {"x": FloatDistribution(0.0, 1.0), "n": IntDistribution(1, 9), "c": CategoricalDistribution(["a", "b"])}


EXTRAS = {"gp": ("scipy",)}  # what each extra brings that the internals' users need


def skip_without(extra: str) -> None:
    missing = [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs the {extra} extra ({', '.join(missing)}): pip install 'trials[{extra}]'")


def add_trial(study: optuna.Study, value: float) -> None:
    trial = study.ask()
    for name, distribution in SPACE.items():
        trial._suggest(name, distribution)
    trial.report(value, step=1)
    trial.set_user_attr("u", 1)
    study.tell(trial, value)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Real Optuna objects: a study in memory, one in SQLite, and a journal holding every operation."""
    tmp = tmp_path_factory.mktemp("optuna")
    memory = optuna.create_study()
    add_trial(memory, 0.5)
    rdb = optuna.storages.RDBStorage(f"sqlite:///{tmp / 'db.sqlite3'}")
    rdb_study = optuna.create_study(storage=rdb, study_name="s")
    add_trial(rdb_study, 0.5)
    rdb_study.enqueue_trial({"x": 0.5})
    path = str(tmp / "journal.log")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(path))
    study = optuna.create_study(storage=storage, study_name="s")
    study.set_user_attr("u", 1)
    storage.set_study_system_attr(study._study_id, "s", 1)
    add_trial(study, 0.5)
    study.enqueue_trial({"x": 0.25})  # a trial made from a template, then moved to RUNNING by ask
    add_trial(study, 0.25)
    study.add_trial(optuna.trial.create_trial(params={"x": 0.5}, distributions={"x": SPACE["x"]}, value=1.0,
                                              intermediate_values={1: 1.0}, user_attrs={"u": 1},
                                              system_attrs={"s": 1}))
    storage.set_trial_system_attr(study.ask()._trial_id, "s", 1)
    optuna.delete_study(study_name=optuna.create_study(storage=storage).study_name, storage=storage)
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return SimpleNamespace(memory=memory, rdb=rdb, rdb_study=rdb_study, journal=storage, path=path, records=records)


# --- private imports ------------------------------------------------------------------------------------------
def _touch_models(models: Any, env: SimpleNamespace) -> None:
    for table, (name, _, _) in internals.TABLES.items():
        assert getattr(models, name).__tablename__ == table, f"{name} is not the model of {table}"


def _touch_scoped_session(create: Any, env: SimpleNamespace) -> None:
    with create(env.rdb.scoped_session) as session:
        assert session.execute(text("SELECT 1")).scalar() == 1


def _touch_operations(ops: Any, env: SimpleNamespace) -> None:
    assert issubclass(ops, enum.IntEnum) and ops.SET_TRIAL_INTERMEDIATE_VALUE and ops.SET_TRIAL_USER_ATTR


def _touch_replay_result(cls: Any, env: SimpleNamespace) -> None:
    result = cls("w-")
    result.apply_logs(env.records)
    assert result.log_number_read == len(env.records)


def _touch_tell(tell: Any, env: SimpleNamespace) -> None:
    study = optuna.create_study()
    trial = study.ask()
    tell(study=study, trial=trial.number, value_or_values=[1.0], state=None, skip_if_finished=True)
    tell(study=study, trial=trial.number, value_or_values=None, state=TrialState.FAIL, skip_if_finished=True)
    assert study.trials[0].state == TrialState.COMPLETE


def _touch_round(round_one: Any, env: SimpleNamespace) -> None:
    space = internals.GPSearchSpace({"n": IntDistribution(0, 10, step=2)})
    _, steps, scale_types = internals.gp_space_arrays(space)
    rounded = round_one(np.array([0.33]), scale_types[0], (-0.5 / 12, 1 + 0.5 / 12), steps[0])
    assert isinstance(rounded, np.ndarray) and rounded.shape == (1,)


def _touch_lbfgsb(minimize: Any, env: SimpleNamespace) -> None:
    def f(x: np.ndarray, fixed: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        return ((x - 0.3) ** 2).sum(axis=1), 2 * (x - 0.3)

    x, fx, n_iter = minimize(func_and_grad=f, x0_batched=np.array([[0.9], [0.1]]), batched_args=([0, 1],),
                             bounds=[(0.0, 1.0)], pgtol=1e-8, max_iters=200)
    assert np.allclose(x, 0.3, atol=1e-4) and fx.shape == (2,) and n_iter.shape == (2,)


def _touch_gp_params(get_params: Any, env: SimpleNamespace) -> None:
    running = optuna.trial.create_trial(state=TrialState.RUNNING, params={}, distributions={}, system_attrs={
        f"{internals.GP_RELATIVE_PARAMS_KEY}:0": '{"x": 0.', f"{internals.GP_RELATIVE_PARAMS_KEY}:1": '5}'})
    assert get_params(running) == {"x": 0.5}


TOUCH = {
    "rdb_models": _touch_models,
    "create_scoped_session": _touch_scoped_session,
    "JournalStorageReplayResult": _touch_replay_result,
    "JournalOperation": _touch_operations,
    "get_lock_file": lambda get, env: get(env.journal._backend._lock).__enter__ and None,
    "tell_with_warning": _touch_tell,
    "GPSearchSpace": lambda cls, env: cls(SPACE).get_normalized_params(env.memory.trials).shape == (1, 3),
    "round_one_normalized_param": _touch_round,
    "DEFAULT_MINIMUM_NOISE_VAR": lambda v, env: isinstance(v, float) and v > 0,
    "batched_lbfgsb": _touch_lbfgsb,
    "gp_params": _touch_gp_params,
    "is_constrained_optimization": lambda f, env: f(env.memory.trials) is False,
}


@pytest.mark.parametrize("name", sorted(internals.PRIVATE_IMPORTS))
def test_private_import(name: str, env: SimpleNamespace) -> None:
    module, attribute, extra = internals.PRIVATE_IMPORTS[name]
    where = f"{module}.{attribute}" if attribute else module
    if extra:
        skip_without(extra)
    try:
        value = getattr(internals, name)
    except internals.OptunaInternalError as err:
        pytest.fail(str(err))
    assert name in TOUCH, f"no check of {name}: add one to TOUCH"
    try:
        ok = TOUCH[name](value, env)
    except Exception as err:  # noqa: BLE001 - whatever the change, name the internal
        pytest.fail(f"{OPTUNA} changed the shape of {where} (trials' {name}): {type(err).__name__}: {err}")
    assert ok is not False, f"{OPTUNA} changed the shape of {where} (trials' {name})"


# --- private attributes ---------------------------------------------------------------------------------------
def _gp_sampler() -> optuna.samplers.GPSampler:
    return optuna.samplers.GPSampler(seed=0)


BUILD = {
    "FrozenTrial": lambda env: env.memory.trials[0],
    "Study": lambda env: env.memory,
    "Trial": lambda env: optuna.Trial(env.memory, env.memory._storage.create_new_trial(env.memory._study_id)),
    "CachedStorage": lambda env: env.rdb_study._storage,
    "InMemoryStorage": lambda env: env.memory._storage,
    "InMemoryStudyInfo": lambda env: env.memory._storage._studies[env.memory._study_id],
    "RDBStorage": lambda env: env.rdb,
    "JournalStorage": lambda env: env.journal,
    "JournalFileBackend": lambda env: env.journal._backend,
    "JournalStorageReplayResult": lambda env: env.journal._replay_result,
    "BaseJournalSnapshot": lambda env: internals.BaseJournalSnapshot,
    "GPSampler": lambda env: _gp_sampler(),
    "TPESampler": lambda env: optuna.samplers.TPESampler(constraints_func=lambda t: (0.0,)),
    "GPSearchSpace": lambda env: internals.GPSearchSpace(SPACE),
    "TrialValueModel": lambda env: internals.rdb_models.TrialValueModel,
    "TrialIntermediateValueModel": lambda env: internals.rdb_models.TrialIntermediateValueModel,
    "StudyModel": lambda env: internals.rdb_models.StudyModel,
}
KINDS = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, float),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "dict": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
    "lock": lambda v: callable(getattr(v, "acquire", None)) and callable(getattr(v, "__enter__", None)),
    "file lock": lambda v: callable(getattr(v, "acquire", None)) and callable(getattr(v, "release", None)),
    "method": callable,
    "callable": callable,
    "class": lambda v: isinstance(v, type),
    "array": lambda v: isinstance(v, np.ndarray),
    "storage": lambda v: isinstance(v, optuna.storages.BaseStorage),
    "journal backend": lambda v: isinstance(v, optuna.storages.journal.BaseJournalBackend),
    "replay result": lambda v: isinstance(v, internals.JournalStorageReplayResult),
    "search space cache": lambda v: isinstance(v, optuna.search_space.IntersectionSearchSpace),
    "random state": lambda v: isinstance(getattr(v, "rng", None), np.random.RandomState),
}
ATTRIBUTES = [(owner, name, kind) for owner, names in internals.PRIVATE_ATTRIBUTES.items()
              for name, kind in names.items()]


@pytest.mark.parametrize(("owner", "name", "kind"), ATTRIBUTES, ids=[f"{o}.{n}" for o, n, _ in ATTRIBUTES])
def test_private_attribute(owner: str, name: str, kind: str, env: SimpleNamespace) -> None:
    if owner in internals.GP_OWNERS:
        skip_without("gp")
    assert owner in BUILD and kind in KINDS, f"no way to build {owner} or to check a {kind}: add it to BUILD/KINDS"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            obj = BUILD[owner](env)
        except Exception as err:  # noqa: BLE001
            pytest.fail(f"{OPTUNA}: cannot build a {owner} to check {owner}.{name}: {type(err).__name__}: {err}")
    assert hasattr(obj, name), f"{OPTUNA}'s {owner} has no {name} (trials uses it as a {kind})"
    value = getattr(obj, name)
    assert KINDS[kind](value), f"{OPTUNA}'s {owner}.{name} is a {type(value).__name__}, not what trials uses ({kind})"


# --- the database -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("table", sorted(internals.TABLES))
def test_table(table: str, env: SimpleNamespace) -> None:
    model_name, columns, keys = internals.TABLES[table]
    found = sa_inspect(env.rdb.engine)
    assert table in found.get_table_names(), f"{OPTUNA}'s database has no table {table}"
    missing = set(columns) - {c["name"] for c in found.get_columns(table)}
    assert not missing, f"{OPTUNA}'s table {table} has no column {sorted(missing)}"
    if keys:
        unique = [set(u["column_names"]) for u in found.get_unique_constraints(table)]
        unique += [set(i["column_names"]) for i in found.get_indexes(table) if i["unique"]]
        assert set(keys) in unique, f"{OPTUNA}'s table {table} has no unique key {keys} (trials upserts on it)"
    model = getattr(internals.rdb_models, model_name, None)
    assert model is not None and model.__tablename__ == table, f"{OPTUNA} has no model {model_name} of {table}"
    missing = set(columns) - {c.name for c in sa_inspect(model).columns}
    assert not missing, f"{OPTUNA}'s {model_name} maps no column {sorted(missing)}"


def test_the_trials_table_stores_a_state_by_its_name(env: SimpleNamespace) -> None:
    with env.rdb.engine.connect() as c:
        stored = {row[0] for row in c.execute(text("SELECT state FROM trials"))}
    assert {internals.STORED_STATES["WAITING"].strip("'"), "COMPLETE"} <= stored, f"{OPTUNA} stores states as {stored}"


def test_the_sql_names_only_listed_tables_and_columns() -> None:
    nodes = [n for p in sorted((ADAPTER / "database").glob("*.py")) for n in ast.walk(ast.parse(p.read_text()))]
    skip = {id(n.value) for n in nodes if isinstance(n, ast.Expr)}  # docstrings
    skip |= {id(v) for n in nodes if isinstance(n, ast.JoinedStr) for v in n.values}
    sql = "\n".join([n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)
                     and id(n) not in skip] + [ast.unparse(n) for n in nodes if isinstance(n, ast.JoinedStr)])
    ctes = set(re.findall(r"\bWITH\s+([a-z_]+)\s+AS\b", sql))
    tables = set(re.findall(r"\b(?:FROM|JOIN|UPDATE|INTO)\s+([a-z_]+)\b", sql)) - ctes
    assert tables <= {*internals.TABLES, "trials_leases"}, sorted(tables - set(internals.TABLES))
    columns = set(re.findall(r"\bt\.([a-z_]+)", sql))  # (the trials table's alias)
    listed = set(internals.TABLES["trials"][1])
    assert columns and columns <= listed, sorted(columns - listed)


# --- the journal --------------------------------------------------------------------------------------------
OPS = [name for name in vars(internals.JournalOp) if name.isupper()]


@pytest.mark.parametrize("name", OPS)
def test_journal_op_code(name: str) -> None:
    theirs = getattr(internals.JournalOperation, name, None)
    ours = getattr(internals.JournalOp, name)
    assert theirs is not None and int(theirs) == ours, f"{OPTUNA}'s JournalOperation.{name} is {theirs}, not {ours}"


@pytest.mark.parametrize("op", sorted(internals.JOURNAL_FIELDS), ids=lambda op: OPS[op])
def test_journal_fields(op: int, env: SimpleNamespace) -> None:
    written = [r for r in env.records if r["op_code"] == op]
    assert written, f"the test journal holds no {OPS[op]} record"
    assert all(set(internals.RECORD_FIELDS) <= r.keys() for r in written)
    missing = set(internals.JOURNAL_FIELDS[op]) - {k for r in written for k in r}
    assert not missing, f"{OPTUNA} writes {OPS[op]} records without {sorted(missing)}"


def test_the_journal_stores_states_and_directions_by_their_numbers(env: SimpleNamespace) -> None:
    assert {s.name: s.value for s in replay.StoredState} == {s.name: s.value for s in TrialState}
    directions = [d for r in env.records if r["op_code"] == internals.JournalOp.CREATE_STUDY for d in r["directions"]]
    assert set(directions) <= {d.value for d in optuna.study.StudyDirection}


def test_the_journal_reader_reads_only_listed_fields() -> None:
    tree = ast.parse((ADAPTER / "replay.py").read_text())
    read = {n.slice.value for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
            and n.value.id == "log" and isinstance(n.slice, ast.Constant)}
    read |= {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Name) and n.func.value.id == "log" and n.func.attr == "get"}
    listed = {f for fields in internals.JOURNAL_FIELDS.values() for f in fields} | set(internals.RECORD_FIELDS)
    assert read and read <= listed, sorted(read - listed)


# --- conventions --------------------------------------------------------------------------------------------
def test_a_fixed_parameter_is_a_system_attribute_the_trial_suggests_from() -> None:
    study = optuna.create_study()
    study.enqueue_trial({"x": 0.25})
    assert study.trials[0].system_attrs[internals.FIXED_PARAMS_ATTR] == {"x": 0.25}
    tid = study._storage.create_new_trial(study._study_id)
    study._storage.set_trial_system_attr(tid, internals.FIXED_PARAMS_ATTR, {"x": 0.75})
    assert optuna.Trial(study, tid).suggest_float("x", 0.0, 1.0) == 0.75


def test_the_gp_samplers_system_attribute_of_relative_params() -> None:
    from optuna.samplers._gp import sampler

    assert (sampler._RELATIVE_PARAMS_KEY, sampler._SYSTEM_ATTR_MAX_LENGTH) == (
        internals.GP_RELATIVE_PARAMS_KEY, internals.GP_SYSTEM_ATTR_MAX_LENGTH)


# --- one place ----------------------------------------------------------------------------------------------
PRIVATE_NAMES = {n for names in internals.PRIVATE_ATTRIBUTES.values() for n in names if n.startswith("_")}
# a listed name the adapter may still spell out: an override of GPSampler's, and JobStore's own attribute and method
NAMED_ELSEWHERE = {"_sample_relative_impl": {"npgp.py", "warped_gp.py"}, "_study_id": {"store.py", "leases.py"},
                   "_suggest": {"store.py"}}


def _named(tree: ast.AST) -> set[str]:
    """Private names a module reads as attributes or spells as strings (getattr, hasattr, tuples of names)."""
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


@pytest.mark.parametrize("path", sorted(p for p in ADAPTER.rglob("*.py") if p.name != "optuna_internals.py"),
                         ids=lambda p: str(p.relative_to(ADAPTER)))
def test_no_other_adapter_module_names_an_optuna_internal(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    private = [m for m in imported if m.split(".")[0] == "optuna" and any(p.startswith("_") for p in m.split("."))]
    assert private == [], f"import {private} through trials.study.optuna_internals"
    named = {n for n in _named(tree) & PRIVATE_NAMES if path.name not in NAMED_ELSEWHERE.get(n, ())}
    assert named == set(), f"reach {sorted(named)} through trials.study.optuna_internals' accessors"


def test_the_accessors_reach_only_listed_attributes() -> None:
    tree = ast.parse(Path(internals.__file__).read_text())
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    reached = set().union(*(_named(f) for f in functions))
    assert reached <= PRIVATE_NAMES, sorted(reached - PRIVATE_NAMES)


def test_the_names_type_checkers_see_are_the_lazy_imports() -> None:
    tree = ast.parse(Path(internals.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    typed = {a.asname or a.name: (n.module, a.name) for n in block.body if isinstance(n, ast.ImportFrom)
             for a in n.names if n.module and "._" in f".{n.module}"}
    lazy = {name: (module.rpartition(".")[0], module.rpartition(".")[2]) if not attribute else (module, attribute)
            for name, (module, attribute, _) in internals.PRIVATE_IMPORTS.items()}
    assert typed == lazy
