"""The text of each finished trial of a journal job as ``describe --format json`` writes it, kept.

``describe --format json`` of a 10,000-trial job writes 28 MB: every step of every trial, converted
to the REST shape and encoded (0.75 s of its 1.2 s). A finished trial never changes (Optuna ignores
any record about it), so its text is made once and kept beside the journal (``journal.log.rest``):

- under the journal prefix its trials had finished within (its length and CRC-32, as the snapshot
  is named): a cache the journal no longer starts with (``trials repair``, a rewrite by hand) is
  ignored whole, and written again;
- per job, under the digest of what the text is made of besides the trial (the study spec: its
  parameters' types and scales, its metrics; this format): another spec, no text of it is used.

It is never a second source of truth: a text is used only for a trial the journal holds finished
within that prefix, which is exactly the trial it was made from; every other trial is converted
from the journal as before. A cache that is torn, foreign, a link or not a regular file, or that
holds anything but printable ASCII text, is ignored. Like the snapshot, it guards against rewrites,
not against someone who can write the job folder (who can write the journal itself).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trials.study import replay

SUFFIX = ".rest"
FORMAT = 1
# what an indented text of ours holds: printable ASCII (non-ASCII is escaped) and newlines
_EXPECTED = bytes(range(0x20, 0x7F)) + b"\n"

Texts = dict[int, str]  # storage id -> the trial's text, as written two containers deep


@dataclass
class Cache:
    """The kept texts, per job: ``{job id: (spec digest, texts)}``; valid for the journal prefix
    ``n_bytes`` long (``load`` checked it)."""

    n_bytes: int = 0
    jobs: dict[str, tuple[str, Texts]] = field(default_factory=dict)

    def texts(self, job_id: str, digest: str) -> Texts:
        """The job's texts, when they were made from this spec (else none)."""
        kept = self.jobs.get(job_id)
        return kept[1] if kept is not None and kept[0] == digest else {}


def cache_path(journal: str) -> str:
    return journal + SUFFIX


def spec_digest(spec: Mapping[str, Any] | None, metric_ids: Sequence[str]) -> str:
    """What a trial's text is made of besides the trial: the study spec, the metric ids, the format."""
    made_of = {"format": FORMAT, "studySpec": (spec or {}).get("studySpec"), "metrics": list(metric_ids)}
    return hashlib.sha1(json.dumps(made_of, sort_keys=True, default=str).encode()).hexdigest()


def load(journal: str) -> Cache:
    """The texts kept for ``journal`` while it still starts with the prefix they are of; else none."""
    path = cache_path(journal)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return Cache()
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return Cache()
            header = replay.PlainUnpickler(f).load()
            if not (isinstance(header, dict) and header.get("format") == FORMAT
                    and type(header.get("n_bytes")) is int and isinstance(header.get("digest"), str)):
                return Cache()
            n_bytes = header["n_bytes"]
            if not replay.prefix_holds(journal, n_bytes, header["digest"], header.get("journal_stat")):
                return Cache()  # the journal was rewritten since
            jobs = replay.PlainUnpickler(f).load()
    except Exception:  # noqa: BLE001 - torn, foreign or unreadable: as no cache
        return Cache()
    return Cache(n_bytes, jobs) if _well_formed(jobs) else Cache()


def _well_formed(jobs: Any) -> bool:
    if type(jobs) is not dict:
        return False
    for job_id, kept in jobs.items():
        if type(job_id) is not str or type(kept) is not tuple or len(kept) != 2:
            return False
        digest, texts = kept
        if type(digest) is not str or type(texts) is not dict:
            return False
        for sid, text in texts.items():
            if type(sid) is not int or type(text) is not str or not _is_printable(text):
                return False
    return True


def _is_printable(text: str) -> bool:
    """Printable ASCII and newlines only (28 MB in ~20 ms: a regular expression took 0.5 s)."""
    return text.isascii() and not text.encode("ascii").translate(None, _EXPECTED)


def save(journal: str, n_bytes: int, jobs: dict[str, tuple[str, Texts]]) -> None:
    """Keep ``jobs``' texts, each of a trial finished within the journal's first ``n_bytes``,
    atomically; a job folder this process cannot write keeps its old cache (reading never needs it)."""
    path = cache_path(journal)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as f:
            digest, journal_stat = replay.prefix_digest(journal, n_bytes)
            header = {"format": FORMAT, "n_bytes": n_bytes, "digest": digest, "journal_stat": journal_stat}
            pickle.dump(header, f, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.dump(jobs, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
