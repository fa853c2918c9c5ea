"""Tests for trials.runtime.logs: Cloud Logging JSON lines, severities, format choice, install/undo."""

import io
import json
import logging
import sys

import pytest

from trials.errors import ConfigError
from trials.runtime.logs import JsonFormatter, choose_format, install, severity


def record(level=logging.INFO, msg="hello %s", args=("world",), exc_info=None):
    rec = logging.LogRecord("user.mod", level, "/src/train.py", 42, msg, args, exc_info,
                            func="fit")
    rec.created = 1796013114.309622
    return rec


def test_json_line_has_cloud_logging_special_fields():
    line = JsonFormatter(labels={"trial_id": "7", "replica": "workerpool0-0"}).format(record())
    entry = json.loads(line)
    assert "\n" not in line
    assert entry["severity"] == "INFO" and entry["message"] == "hello world"
    assert entry["timestampSeconds"] == 1796013114
    assert abs(entry["timestampNanos"] - 309_622_000) < 1000
    assert entry["logging.googleapis.com/labels"] == {"trial_id": "7", "replica": "workerpool0-0"}
    assert entry["logging.googleapis.com/sourceLocation"] == {
        "file": "/src/train.py", "line": "42", "function": "fit"}


def test_exception_traceback_is_in_the_message_of_one_line():
    try:
        raise ValueError("bad value")
    except ValueError:
        rec = record(logging.ERROR, "failed", (), sys.exc_info())
    line = JsonFormatter().format(rec)
    entry = json.loads(line)
    assert entry["severity"] == "ERROR" and "\n" not in line
    assert entry["message"].startswith("failed\nTraceback") and entry["message"].endswith(
        "ValueError: bad value")
    assert "logging.googleapis.com/labels" not in entry


@pytest.mark.parametrize("level, name", [
    (logging.DEBUG, "DEBUG"), (logging.INFO, "INFO"), (logging.WARNING, "WARNING"),
    (logging.ERROR, "ERROR"), (logging.CRITICAL, "CRITICAL"), (5, "DEFAULT"), (25, "INFO"),
])
def test_severity(level, name):
    assert severity(level) == name


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_format_choice():
    assert choose_format({}, Tty()) == "text"
    assert choose_format({}, io.StringIO()) == "json"
    assert choose_format({"TRIALS_LOG_FORMAT": "JSON"}, Tty()) == "json"
    assert choose_format({"TRIALS_LOG_FORMAT": "text"}, io.StringIO()) == "text"
    with pytest.raises(ConfigError, match=r"\$TRIALS_LOG_FORMAT must be one of json, text, got 'xml'"):
        choose_format({"TRIALS_LOG_FORMAT": "xml"})


def test_install_adds_a_handler_only_when_root_has_none(monkeypatch):
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.WARNING)
    stream = io.StringIO()
    undo = install(fmt="json", labels={"trial_id": "1"}, stream=stream)
    assert undo is not None
    logging.getLogger("user").info("epoch %d", 3)
    entry = json.loads(stream.getvalue())
    assert entry["message"] == "epoch 3" and entry["logger"] == "user"
    assert install(fmt="json", stream=io.StringIO()) is None  # configured already: left alone
    undo()
    assert root.handlers == [] and root.level == logging.WARNING


def test_install_text(monkeypatch):
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    stream = io.StringIO()
    undo = install(fmt="text", stream=stream)
    logging.getLogger("user").warning("careful")
    undo()
    assert stream.getvalue().rstrip().endswith("WARNING user: careful")


def test_google_json_fields_are_merged_into_the_entry():
    """``extra={"json_fields": …}``, as Cloud Logging's Python library takes it, reaches the JSON line."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter(labels={"trial_id": "7"}))
    logger = logging.getLogger("user.train.json_fields")
    logger.addHandler(handler)
    try:
        logger.warning("epoch %d done", 3, extra={"json_fields": {
            "epoch": 3, "loss": 0.25, "severity": "DEBUG", "message": "not this",
            "logging.googleapis.com/labels": {"run": "a", "trial_id": "not this"}}})
    finally:
        logger.removeHandler(handler)
    entry = json.loads(out.getvalue())
    assert entry["epoch"] == 3 and entry["loss"] == 0.25
    assert entry["severity"] == "WARNING" and entry["message"] == "epoch 3 done"  # special fields win
    assert entry["logging.googleapis.com/labels"] == {"run": "a", "trial_id": "7"}
