"""The pure parts of scale-out: staleness, heartbeat rate, reconciling leases after an outage, outage
retries, password scrubbing."""

import signal

import pytest
from sqlalchemy import exc as sa_exc

from trials.errors import ConfigError, OutageInterruptedError, StorageUnreachableError
from trials.storage_url import redact, scrub
from trials.study.database.leases import Lease, heartbeat_interval, is_stale, reconcile, takeover_reason
from trials.study.database.outages import Outages, is_connection_error, outage_limit_s


def lease(hb, owner="h:1"):
    return Lease(trial_id=3, owner=owner, heartbeat=hb, generation=1)


def test_staleness_uses_one_clock_and_the_grace():
    assert not is_stale(lease(100.0), db_now=129.9, stale_after_s=30, unleased_for_s=0)
    assert is_stale(lease(100.0), db_now=130.0, stale_after_s=30, unleased_for_s=0)
    assert not is_stale(None, db_now=0, stale_after_s=30, unleased_for_s=29)
    assert is_stale(None, db_now=0, stale_after_s=30, unleased_for_s=30)
    reason = takeover_reason(lease(100.0, "hostA:42"), db_now=135.5, me="hostB:7")
    assert "hostA:42" in reason and "35.5s" in reason and "hostB:7" in reason


def test_heartbeat_interval_is_a_sixth_of_the_grace_within_bounds():
    assert heartbeat_interval(30) == 5.0
    assert heartbeat_interval(3) == 0.5
    assert heartbeat_interval(0.5) == 0.2
    assert heartbeat_interval(600) == 5.0


def test_reconcile_runs_what_this_worker_leased_or_was_claiming_and_drops_the_rest():
    def of(tid, owner):
        return tid, Lease(trial_id=tid, owner=owner, heartbeat=0.0, generation=1)

    leases = dict([of(1, "me"), of(2, "me"), of(3, "other"), of(4, "me"), of(6, "other")])
    # 1: mine, RUNNING, not run here (a claim whose answer was lost): run it
    # 2: mine and run here; 3, 6: another worker's; 4: mine but no longer RUNNING: drop the lease
    assert reconcile(leases, me="me", held={2}, running={1, 2, 3}, claiming=None) == ([1], [4])
    # 5: being claimed when the connection dropped, RUNNING, nobody's lease: it is this claim's
    assert reconcile(leases, me="me", held={1, 2}, running={1, 2, 3, 5}, claiming=5) == ([5], [4])
    # the claim did not commit (still WAITING), or another worker leased it: not ours
    assert reconcile(leases, me="me", held={1, 2}, running={1, 2, 3}, claiming=5) == ([], [4])
    assert reconcile(leases, me="me", held={1, 2}, running={1, 2, 3, 6}, claiming=6) == ([], [4])
    assert reconcile({}, me="me", held=set(), running={7}, claiming=7) == ([7], [])
    assert reconcile(leases, me="me", held={1, 2, 4}, running={1, 2, 4}, claiming=2) == ([], [])


def blink(n_failures, err_factory):
    calls = {"n": 0}

    def fn(x):
        calls["n"] += 1
        if calls["n"] <= n_failures:
            raise err_factory()
        return x * 2

    return fn, calls


def op_error():
    orig = Exception("server closed the connection unexpectedly\n\tThis probably means")
    try:
        raise sa_exc.OperationalError("SELECT 1", {}, orig)
    except sa_exc.OperationalError as inner:
        try:
            raise RuntimeError("An exception is raised during the commit.") from inner
        except RuntimeError as outer:
            return outer


def test_outages_retry_with_backoff_and_say_so_once_per_outage():
    lines, sleeps, now = [], [], [0.0]

    def sleep(s):
        sleeps.append(s)
        now[0] += s

    o = Outages(lines.append, first_delay_s=0.5, max_delay_s=2.0, sleep=sleep, clock=lambda: now[0])
    fn, calls = blink(5, op_error)
    assert o.call(fn, 21) == 42 and calls["n"] == 6
    assert sleeps == [0.5, 1.0, 2.0, 2.0, 2.0]
    assert len(lines) == 2 and lines[0].startswith("database unreachable (server closed the connection")
    assert lines[1] == "database reachable again after 7.5s"
    fn, calls = blink(1, op_error)
    o.call(fn, 1)
    assert len(lines) == 4 and o.n_outages == 2


def test_outages_do_not_swallow_other_errors():
    o = Outages(lambda line: pytest.fail(line), sleep=lambda s: pytest.fail("slept"))
    fn, _ = blink(1, lambda: sa_exc.IntegrityError("INSERT", {}, Exception("duplicate key")))
    with pytest.raises(sa_exc.IntegrityError):
        o.call(fn, 1)
    assert is_connection_error(op_error())
    assert not is_connection_error(ValueError("x"))


def test_scrub_and_redact_hide_the_password_everywhere():
    url = "postgresql://bob:hunter2@db.example:5432/jobs"
    assert redact(url) == "postgresql://bob:***@db.example:5432/jobs"
    assert redact("postgresql://bob@db/jobs") == "postgresql://bob@db/jobs"
    text = f"cannot reach {url}; dsn password=hunter2 user=bob"
    assert "hunter2" not in scrub(text, url) and "bob:***@" in scrub(text, url)
    assert scrub("plain", None) == "plain"
    o_lines = []
    o = Outages(o_lines.append, url=url, sleep=lambda s: None)
    fn, _ = blink(1, lambda: sa_exc.OperationalError("x", {}, Exception("auth failed for hunter2")))
    o.call(fn, 1)
    assert "hunter2" not in " ".join(o_lines)


def test_an_outage_longer_than_the_limit_ends_with_one_line_naming_the_storage():
    url = "postgresql://bob:hunter2@db.example:5432/jobs"
    lines, now = [], [0.0]

    def sleep(s):
        now[0] += s

    o = Outages(lines.append, url=url, sleep=sleep, clock=lambda: now[0], give_up_after_s=5.0)
    fn, calls = blink(10**6, op_error)
    with pytest.raises(StorageUnreachableError) as caught:
        o.call(fn, 1)
    message = str(caught.value)
    assert now[0] == 5.0 and calls["n"] < 12  # the last wait is cut to the limit
    assert message.startswith("the database postgresql://bob:***@db.example:5432/jobs has been unreachable for 5s")
    assert "hunter2" not in message + " ".join(lines) and "\n" not in message
    assert caught.value.exit_code == 2
    assert lines == ["database unreachable (server closed the connection unexpectedly); retrying with backoff "
                     "up to 10s, giving up after 5s (TRIALS_OUTAGE_TIMEOUT)"]


def test_a_stop_signal_ends_an_outage_wait_at_once():
    o = Outages(lambda line: None, sleep=lambda s: o.interrupt(signal.SIGTERM))
    fn, calls = blink(10**6, op_error)
    with pytest.raises(OutageInterruptedError, match="stopped by SIGTERM while the database was unreachable"):
        o.call(fn, 1)
    assert calls["n"] == 1
    fn, calls = blink(10**6, op_error)  # a stop asked before an outage: its first failure ends the call
    with pytest.raises(OutageInterruptedError):
        o.call(fn, 1)
    assert calls["n"] == 1
    assert OutageInterruptedError("x").exit_code == 130


def test_the_outage_limit_comes_from_trials_outage_timeout():
    assert outage_limit_s({}) == 300.0
    assert outage_limit_s({"TRIALS_OUTAGE_TIMEOUT": "2.5"}) == 2.5
    assert outage_limit_s({"TRIALS_OUTAGE_TIMEOUT": "inf"}) == float("inf")
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(ConfigError, match="TRIALS_OUTAGE_TIMEOUT: expected a number of seconds > 0"):
            outage_limit_s({"TRIALS_OUTAGE_TIMEOUT": bad})
