"""Reading argparse's --help: the options, their aliases, the switches and the required ones."""

from __future__ import annotations

import argparse

from trials.controller.trial.argparse_help import check_flags, parse_help
from trials.spec.load import loads_spec


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="train.py", description="a trainer: with a colon")
    p.add_argument("--learning_rate", type=float, default=0.1, help="step size")
    p.add_argument("-d", "--data", required=True)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--layers", nargs="*", type=int, help="x " * 60)
    group = p.add_argument_group("model")
    group.add_argument("--hidden-units", type=int)
    either = p.add_mutually_exclusive_group(required=True)
    either.add_argument("--adam", action="store_true")
    either.add_argument("--sgd", action="store_true")
    return p


def test_the_options_of_a_real_help():
    h = parse_help(_parser().format_help())
    assert h is not None and h.complete and h.error is None
    assert set(h.flags) == {"-h", "--help", "--learning_rate", "-d", "--data", "--verbose", "--layers",
                            "--hidden-units", "--adam", "--sgd"}
    assert h.switches == {"-h", "--help", "--verbose", "--adam", "--sgd"}
    assert h.required == ((("-d", "--data"),), (("--adam",), ("--sgd",)))
    assert [h.shown(g) for g in h.required] == ["--data", "one of --adam, --sgd"]


def test_a_usage_and_an_error_only():
    p = _parser()
    text = p.format_usage() + "train.py: error: argument --learning_rate: invalid float value: 'x'\n"
    h = parse_help(text)
    assert h is not None and not h.complete
    assert h.error == "argument --learning_rate: invalid float value: 'x'"
    assert "--learning_rate" in h.flags and "--learning_rate:" not in h.flags


def test_text_that_is_not_argparse():
    assert parse_help("") is None
    assert parse_help("Usage: train [OPTIONS]\n  --lr FLOAT\n") is None  # click's
    assert parse_help("training with {} (no help)\n") is None


def test_checks_of_a_spec():
    h = parse_help(_parser().format_help())
    assert h is not None
    study = loads_spec("""metrics: {m: maximize}
parameters:
  learning_rat: {type: double, min: 0.1, max: 1}
  hidden_units: {type: integer, min: 1, max: 4}
  adam: {type: categorical, values: ["1"]}
  opt:
    type: categorical
    values: [a, b]
    when: [{values: [a], parameters: {data: {type: categorical, values: [x]}}}]
""").study
    problems, warnings, n = check_flags(h, study, args=["--sg", "--layers", "1", "-2"], spec_source="s.yaml")
    assert n == 7
    assert problems == [
        "--hidden_units (a parameter of s.yaml) is not a flag of the trainer: did you mean --hidden-units?",
        "--adam takes no value in the trainer (a switch), but each trial gets --adam=VALUE, which argparse refuses",
        "--opt (a parameter of s.yaml) is not a flag of the trainer: its flags: --learning_rate, --verbose, "
        "--layers, --hidden-units, --adam, --sgd, --data",
        "--data is conditional in s.yaml, so some trials do not get it, but the trainer requires --data"]
    assert warnings == [
        "--learning_rat (a parameter of s.yaml) is not a flag of the trainer, but its argparse takes it as "
        "--learning_rate (a prefix: allow_abbrev, on by default); name it --learning_rate (a trainer with "
        "allow_abbrev=False, or a new option starting alike, refuses it)",
        "--sg (in the trial's args) is not a flag of the trainer, but its argparse takes it as --sgd (a prefix: "
        "allow_abbrev, on by default); name it --sgd (a trainer with allow_abbrev=False, or a new option starting "
        "alike, refuses it)"]
