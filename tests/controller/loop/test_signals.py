"""The job loop's signal handlers: held from a controller's start, handed to the loop when it runs."""

from __future__ import annotations

import os
import signal

from trials.controller.loop.signals import LoopSignals


def test_a_signal_before_the_loop_is_held_and_handed_to_it() -> None:
    before = signal.getsignal(signal.SIGTERM)
    signals = LoopSignals()
    release = signals.hold()
    told: list[int] = []
    signals.tell(told.append)
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # the start: no loop yet, not the default action
        assert signals.held == [signal.SIGTERM] and told == [signal.SIGTERM]
        got: list[int] = []
        restore = signals.install(got.append)
        assert got == [signal.SIGTERM] and signals.held == []
        os.kill(os.getpid(), signal.SIGHUP)
        assert got == [signal.SIGTERM, signal.SIGHUP] and told == [signal.SIGTERM, signal.SIGHUP]
        restore()  # the loop is over: held again, still not the default action
        os.kill(os.getpid(), signal.SIGINT)
        assert got == [signal.SIGTERM, signal.SIGHUP] and signals.held == [signal.SIGINT]
    finally:
        release()
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_listener_told_late_hears_the_signals_held_so_far() -> None:
    signals = LoopSignals()
    release = signals.hold()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        told: list[int] = []
        signals.tell(told.append)  # a database outage's wait created after the signal
        assert told == [signal.SIGTERM]
    finally:
        release()


def test_install_without_hold_restores_the_previous_handlers() -> None:
    before = signal.getsignal(signal.SIGHUP)
    got: list[int] = []
    restore = LoopSignals().install(got.append)
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        assert got == [signal.SIGHUP]
    finally:
        restore()
    assert signal.getsignal(signal.SIGHUP) == before
