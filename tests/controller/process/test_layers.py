"""Which sandbox layers a job keeps: a replica's last failed attempt's, within a bound; never through a link."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from trials.controller.process import layers


def layer(trial: Path, name: str, n_bytes: int = 0) -> str:
    upper = trial / "sandbox" / name / "layers" / "0" / "upper"
    upper.mkdir(parents=True)
    (trial / "sandbox" / name / "work" / "work").mkdir(parents=True)
    (upper / "scratch").write_bytes(os.urandom(n_bytes))
    return str(upper.parents[2])


def names(job: Path) -> set[str]:
    return {str(p.relative_to(job)) for p in job.glob("*/sandbox/*")}


def test_a_replicas_last_failed_attempt_is_kept_and_a_succeeded_one_goes(tmp_path: Path) -> None:
    keep = layers.Layers(max_bytes=10 << 20)
    for n, failed in enumerate([True, True, False]):
        keep.ended(layer(tmp_path / "1", f"workerpool0-0.{n}"), failed=failed)
    keep.ended(layer(tmp_path / "1", "workerpool1-0.0"), failed=True)  # another replica: its own
    keep.ended(layer(tmp_path / "2", "workerpool0-0.0"), failed=False)
    keep.drain()
    assert names(tmp_path) == {"1/sandbox/workerpool0-0.1", "1/sandbox/workerpool1-0.0"}
    assert not (tmp_path / "1" / "sandbox" / "workerpool0-0.1" / "work").exists()  # scratch of the overlays
    assert [k.path for k in layers.kept_layers(str(tmp_path))] == [
        str(tmp_path / "1" / "sandbox" / "workerpool0-0.1"), str(tmp_path / "1" / "sandbox" / "workerpool1-0.0")]


def removal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "trials-layers"]


def test_the_removals_thread_ends_with_its_work_and_starts_again_for_more(tmp_path: Path) -> None:
    # a process running job after job in-process (trials.tune) keeps no idle thread a job, and a fork
    # after a job (the report's drawing child, which needs a process of one thread) is not refused
    keep = layers.Layers()
    keep.ended(layer(tmp_path / "1", "workerpool0-0.0"), failed=False)
    keep.drain()
    assert removal_threads() == [] and names(tmp_path) == set()
    keep.ended(layer(tmp_path / "2", "workerpool0-0.0"), failed=False)
    keep.drain()
    assert removal_threads() == [] and names(tmp_path) == set()


def test_the_kept_layers_stay_within_the_bound_oldest_first(tmp_path: Path) -> None:
    keep = layers.Layers(max_bytes=3 << 20)
    keep.settle(layer(tmp_path / "1", "workerpool0-0.0", 1 << 20), failed=True)
    keep.settle(layer(tmp_path / "2", "workerpool0-0.0", 1 << 20), failed=True)
    keep.settle(layer(tmp_path / "3", "workerpool0-0.0", 4 << 20), failed=True)  # bigger than the bound: not kept
    assert names(tmp_path) == {"1/sandbox/workerpool0-0.0", "2/sandbox/workerpool0-0.0"}
    keep.settle(layer(tmp_path / "4", "workerpool0-0.0", (3 << 19)), failed=True)
    assert names(tmp_path) == {"2/sandbox/workerpool0-0.0", "4/sandbox/workerpool0-0.0"}


def test_removal_and_gc_never_follow_a_link_a_trainer_planted(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    job = tmp_path / "job"
    state = layer(job / "1", "workerpool0-0.0")
    os.symlink(outside, Path(state) / "layers" / "0" / "upper" / "link")
    (job / "1" / "sandbox" / "workerpool0-0.1").symlink_to(outside)  # a link where a layer was
    closed = Path(state) / "layers" / "0" / "upper" / "closed"
    closed.mkdir()
    closed.chmod(0)
    keep = layers.Layers()
    keep.settle(state, failed=False)
    assert not Path(state).exists()
    assert layers.collect(str(job)) == (0, 0)  # a link is no layer
    assert not (job / "1" / "sandbox").exists() and (outside / "keep").read_text() == "x"
