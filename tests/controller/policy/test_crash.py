"""The useful part of a crash: the exception and the traceback's last lines, from plain or JSON logs."""

import json

from trials.controller.policy import crash

TRACEBACK = ["Traceback (most recent call last):", '  File "t.py", line 9, in <module>', "    main()",
             '  File "t.py", line 5, in main', '    raise ValueError("bad x")', "ValueError: bad x"]


def test_plain_traceback_gives_the_exception_then_the_last_frames():
    assert crash.summary(["starting", *TRACEBACK, ""]) == [
        "ValueError: bad x", '  File "t.py", line 9, in <module>', "    main()",
        '  File "t.py", line 5, in main', '    raise ValueError("bad x")']


def test_json_log_lines_are_read_like_plain_ones():
    line = json.dumps({"severity": "ERROR", "message": "training failed\n" + "\n".join(TRACEBACK),
                       "timestampSeconds": 1})
    assert crash.summary([json.dumps({"severity": "INFO", "message": "epoch 1"}), line])[0] == "ValueError: bad x"
    # a traceback kept in its own field
    other = json.dumps({"msg": "boom", "exc_info": "\n".join(TRACEBACK)})
    assert crash.summary([other])[0] == "ValueError: bad x"


def test_the_last_of_chained_tracebacks_wins_and_without_one_the_last_line():
    chained = [*TRACEBACK, "", "During handling of the above exception, another exception occurred:", "",
               "Traceback (most recent call last):", '  File "t.py", line 12, in <module>',
               "RuntimeError: cleanup failed"]
    assert crash.summary(chained)[0] == "RuntimeError: cleanup failed"
    assert crash.summary(["loading", "CUDA error: out of memory", "  "]) == ["CUDA error: out of memory"]
    assert crash.summary([]) == []


def test_control_characters_and_long_lines_are_made_safe():
    (line,) = crash.summary(["Error: \x1b[31mred\x1b[0m " + "x" * 1000])
    assert "\x1b" not in line and len(line) <= crash.MAX_LINE_CHARS
