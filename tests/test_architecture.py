"""The three roles import in one direction; only the Optuna adapter imports optuna."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "trials"
VOCABULARY = {"errors", "protocol", "records", "spec", "timefmt", "spec_load", "spec_node", "spec_rules",
              "spec_short", "spec_legacy", "spec_export", "spec_text"}
RUNTIME = {"flags", "reporting", "checkpoint", "context", "cluster", "logs", "tensorboard",
           "entrypoint", "pytest_plugin"}
OPTUNA_ALLOWED = {"study", "report_plots"}  # the adapter, and the plots that are Optuna's own


def imports(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "trials":
                names.update(f"trials.{a.name}" for a in node.names)
    return names


def all_modules() -> list[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))


def test_only_the_adapter_imports_optuna():
    offenders = [m for m in all_modules() if m not in OPTUNA_ALLOWED
                 and any(n == "optuna" or n.startswith("optuna.") for n in imports(m))]
    assert offenders == []


def test_vocabulary_and_runtime_never_import_the_controller():
    allowed = {f"trials.{m}" for m in VOCABULARY | RUNTIME} | {"trials"}
    for module in sorted(VOCABULARY | RUNTIME):
        if not (PACKAGE / f"{module}.py").exists():
            continue
        ours = {n for n in imports(module) if n.startswith("trials")}
        assert ours <= allowed, (module, sorted(ours - allowed))
    for module in sorted(VOCABULARY):
        ours = {n for n in imports(module) if n.startswith("trials")}
        assert ours <= {f"trials.{m}" for m in VOCABULARY} | {"trials"}, (module, ours)
