"""The controller's tolerant reader of a trial's metrics: hypertune file and ``metrics.jsonl``."""

from __future__ import annotations

import bisect
import math
import os
import stat
import time
from collections.abc import Callable, Iterable

from trials import files, protocol
from trials.controller.trial.line_tail import LineTail, Scan
from trials.hypertune_file import HypertuneLine, parse_hypertune_line
from trials.records import Key, Measurement, MeasurementLog, parse_record, same_value

HYPERTUNE_MAX_ENTRIES = 100  # cloudml-hypertune keeps only its last 100 reports (deque maxlen=100)
MAX_LINE_BYTES = 1024 * 1024  # a metric line longer than this is garbage, not a torn line (one is ~150 B)
MAX_SCAN_BYTES = 16 * 1024 * 1024  # read at most this much of a file per poll (the rest next poll)
# A file whose mtime is this recent may be rewritten within the same timestamp granule with the same
# size (the "racy clean" problem), so its stat signature is not trusted until it is older.
RACY_WINDOW_NS = 1_000_000_000
# A file found torn in the middle of a rewrite is read again at once only up to this size: cloudml-hypertune's
# 100 reports are tens of KiB, and a trainer that keeps a big file torn is not worth a read (and a parse) a pass.
REREAD_MAX_BYTES = 256 * 1024
_MAX_GAPS_SHOWN = 5


def _entry_key(tag: str, step: int, timestamp: float | None, value: float) -> tuple[object, ...]:
    # Without a timestamp two reports of one step are told apart by their value only.
    if timestamp is None:
        return (tag, step, None, "nan" if math.isnan(value) else value)
    return (tag, step, timestamp)


class TrialMetricsReader:
    """Reads one trial's metrics while it runs, tolerating the hypertune file's quirks.

    The hypertune file is rewritten whole on every report (readers often see it empty or torn), keeps
    only the last 100 reports, and starts afresh when a replica restarts; ``metrics.jsonl`` (written
    by the trials runtime) is append-only and lossless. The reader polls both cheaply (a ``stat``
    when nothing changed), dedupes by (tag, step, timestamp), groups the metrics of one step into one
    :class:`Measurement`, keeps what it read before a restart, prefers ``metrics.jsonl`` per metric
    of a step, and says when the hypertune file dropped steps. It never raises on file content.

    Args:
        hypertune_path: the primary replica's ``CLOUD_ML_HP_METRIC_FILE``.
        metrics_log_path: the trial's ``metrics.jsonl`` (it may never exist).
        metric_ids: the spec's metric ids; other tags are only listed in ``unknown_tags``. Empty
            means keep every tag.
        start_time: the trial's start (``time.time()``), for ``elapsed_s``.

    Example:
        >>> reader = TrialMetricsReader("/no/h.metrics", "/no/metrics.jsonl", ["acc"], start_time=0)
        >>> reader.poll(), reader.measurements(), reader.source
        (False, [], None)
    """

    def __init__(self, hypertune_path: str | os.PathLike[str], metrics_log_path: str | os.PathLike[str],
                 metric_ids: Iterable[str], *, start_time: float):
        self.hypertune_path = os.fspath(hypertune_path)
        self.metrics_log_path = os.fspath(metrics_log_path)
        self.metric_ids = frozenset(metric_ids)
        self.start_time = float(start_time)
        self._attempt = 0
        self._reported: set[str] = set()
        self._other: dict[str, tuple[int, float]] = {}  # a tag not among metric_ids -> its last (step, value)
        self._other_steps: set[int] = set()  # the steps reported under such tags
        self._read_error: str | None = None
        self._skipped: dict[str, str] = {}  # path -> why it is not read (a FIFO, a symlink, ...)
        self._cache: list[Measurement] = []
        self._merged: dict[Key, Measurement] = {}
        self._order: list[Key] = []  # the (step, occurrence) keys of _merged, sorted
        self._dirty: set[Key] = set()  # keys changed in a log since the last merge
        # what the storage held for the trial when this reader started (earlier controllers' reads)
        self._stored: dict[Key, Measurement] = {}
        self._stored_conflicts: set[tuple[Key, str]] = set()
        # hypertune file state
        self._ht_log = MeasurementLog()
        self._ht_seen: set[tuple[object, ...]] = set()
        self._ht_raw_seen: set[str] = set()
        self._ht_sig: tuple[int, ...] | None = None
        self._ht_tail = LineTail(rewritten_whole=True)
        self._ht_exists = False
        self._ht_last_step: int | None = None  # newest step read in the current attempt
        self._gaps: list[tuple[int | None, int]] = []  # (last step read before, first step after)
        self._ht_entries = 0  # the entries the file held at the last read kept, in the current attempt
        self._ht_most = 0  # the most it held in the current attempt (a whole rewrite never holds fewer)
        self._cut: list[str] = []  # rewrites their process's death cut short (read after it ended)
        self._ht_deferred = False  # the last poll found the file in the middle of a rewrite
        self._ht_taken = 0  # the reports the last poll took in (new to this reader)
        # metrics.jsonl state
        self._jl_log = MeasurementLog()
        self._jl_seen: set[tuple[object, ...]] = set()
        self._jl_sig: tuple[int, ...] | None = None
        self._jl_tail = LineTail(rewritten_whole=False)
        self._jl_exists = False
        self._junk: dict[str, dict[tuple[int | None, int], int]] = {}  # path -> (ino, offset) -> size

    # --- public API ---------------------------------------------------------------------------
    def poll(self, *, final: bool = False) -> bool:
        """Read whatever changed since the last poll; ``True`` if anything new arrived.

        ``final``: the writers have exited (the trial ended, or a replica is about to restart), so
        the files are whole: a read is never left for a later one to settle.
        """
        changed = self._poll_metrics_log(final=final)
        return self._poll_hypertune(final=final) or changed

    def on_restart(self) -> None:
        """A replica restarted: keep what was read; its new hypertune file starts fresh."""
        self._start_attempt()
        self._ht_sig = None
        self._ht_tail.reset()

    def seed(self, stored: Iterable[Measurement]) -> None:
        """Start from what the storage already holds for this trial (what earlier controllers read,
        one measurement a step): the record is the union of every attempt's reports. A metric this
        reader reads again at a stored step wins (it is the later report); a different value
        counts in :attr:`conflicts`."""
        self._dirty.update(self._merged)  # (their elapsed times again: ``start_time`` may have moved)
        for m in stored:
            key = (m.step, 0)
            self._stored[key] = m
            self._reported.update(m.metrics)
            self._dirty.add(key)

    def measurements(self) -> list[Measurement]:
        """Every measurement read so far, ordered by step (repeats of a step in report order),
        with ``elapsed_s`` set."""
        if self._dirty:
            self._merge()
        return list(self._cache)

    @property
    def reported_tags(self) -> set[str]:
        """Every metric tag the trial reported, known or not."""
        return set(self._reported)

    @property
    def unknown_tags(self) -> set[str]:
        """Reported tags that are not among ``metric_ids`` (the controller warns once per trial)."""
        if not self.metric_ids:
            return set()
        return self._reported - self.metric_ids

    @property
    def other_tags(self) -> dict[str, tuple[int, float]]:
        """Each reported tag that is not among ``metric_ids``, with its last (step, value) read."""
        return dict(self._other)

    @property
    def n_other_steps(self) -> int:
        """How many steps were reported under tags that are not among ``metric_ids``."""
        return len(self._other_steps)

    def _note_other(self, tag: str, step: int, value: float) -> None:
        if self.metric_ids and tag not in self.metric_ids:
            last = self._other.get(tag)
            if last is None or step >= last[0]:
                self._other[tag] = (step, value)
            self._other_steps.add(step)

    @property
    def missing_steps_warning(self) -> str | None:
        """Why some steps may be missing (a file that is not a regular file was skipped, the
        hypertune file's cap dropped them, or its process died in the middle of a rewrite), or ``None``."""
        notes = [*self._skipped.values(), *self._junk_notes()]
        if not self._jl_exists:  # (metrics.jsonl is lossless: a cut hypertune file loses nothing)
            notes += self._cut
        gaps = self._gap_warning()
        if gaps:
            notes.append(gaps)
        return "; ".join(notes) or None

    @property
    def reread_soon(self) -> bool:
        """The last poll found the hypertune file in the middle of a rewrite (empty, or torn, and
        recently written) and left it for a later read: read it again at once, not a period later.
        The file keeps only its last 100 reports, so a reader that waits loses what it holds now;
        ``metrics.jsonl`` is lossless and needs no haste."""
        return self._ht_deferred and not self._jl_exists

    @property
    def new_reports(self) -> int:
        """How many hypertune reports the last poll took in (0 when it read nothing new): with the
        time since the read before, how fast the file fills."""
        return self._ht_taken

    def _junk_notes(self) -> list[str]:
        notes = []
        for path, lines in self._junk.items():
            n, longest = len(lines), max(lines.values())
            what = f"a line of {longest} bytes" if n == 1 else f"{n} lines of up to {longest} bytes"
            notes.append(f"{path}: skipped {what} (not a metric report: a line of more than "
                         f"{MAX_LINE_BYTES} bytes is not read); the reports before and after it are kept")
        return notes

    def _note_junk(self, path: str, scan: Scan, *, final: bool) -> None:
        skipped = list(scan.skipped)
        if final and scan.state.skipping:  # a line that never ended
            skipped.append((scan.state.skip_start, scan.state.skipping))
        for offset, size in skipped:
            lines = self._junk.setdefault(path, {})
            lines[(scan.state.ino, offset)] = max(size, lines.get((scan.state.ino, offset), 0))

    def _gap_warning(self) -> str | None:
        if self._jl_exists:
            return None  # metrics.jsonl is lossless: the hypertune file's losses do not matter
        gaps = [g for g in self._gaps if not self._gap_is_harmless(*g)]
        if not gaps:
            return None
        shown = ", ".join(
            f"before step {after}" if before is None else f"between step {before} and step {after}"
            for before, after in gaps[:_MAX_GAPS_SHOWN]
        )
        more = len(gaps) - _MAX_GAPS_SHOWN
        if more > 0:
            shown += f" and {more} more gap{'s' if more > 1 else ''}"
        return (
            f"reports may be missing from {self.hypertune_path} ({shown}): cloudml-hypertune keeps "
            f"only its last {HYPERTUNE_MAX_ENTRIES} entries and the file was not read in time; "
            f"report through the trials runtime for a lossless {protocol.METRICS_LOG}"
        )

    def _gap_is_harmless(self, before: int | None, after: int) -> bool:
        """No step can be missing: the gap lies between adjacent steps that have every metric.

        The cap cannot tell "exactly 100 reports since the last read" from "more than 100", so a
        gap is only a suspicion; adjacent complete steps (or a complete step 0) clear it.
        """
        if not self.metric_ids or self._ht_log.repeats:
            return False  # repeated steps: each report is a measurement, a gap loses some
        by_step = self._ht_log.by_step

        def complete(step: int) -> bool:
            return step in by_step and self.metric_ids <= by_step[step].metrics.keys()

        if before is None:
            return after == 0 and complete(0)
        return after - before <= 1 and complete(before) and complete(after)

    @property
    def conflicts(self) -> int:
        """Metric values reported twice for one step with different values (preferred source, and
        read here against stored)."""
        if self._dirty:
            self._merge()
        read = self._jl_log.conflicts if self._jl_exists else self._ht_log.conflicts
        return read + len(self._stored_conflicts)

    @property
    def source(self) -> str | None:
        """``"metrics.jsonl"``, ``"hypertune"``, or ``None`` while neither file was seen."""
        if self._jl_exists:
            return protocol.METRICS_LOG
        return "hypertune" if self._ht_exists else None

    @property
    def read_error(self) -> str | None:
        """The last error reading a file (e.g. permission denied), or ``None``; polling goes on."""
        return self._read_error

    # --- hypertune file -----------------------------------------------------------------------
    def _stat(self, path: str) -> os.stat_result | None:
        """``lstat`` of a metrics file; ``None`` if missing or not a regular file (noted once)."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as err:
            self._read_error = f"cannot stat {path}: {err}"
            return None
        if not stat.S_ISREG(st.st_mode):
            self._skip(path, files.kind_of(st.st_mode))
            return None
        return st

    def _skip(self, path: str, kind: str) -> None:
        # A trainer may plant a FIFO, link or device: opening it could block or leave the trial folder.
        self._skipped.setdefault(path, f"{path} is {kind}, not a regular file: its metrics are not read")

    def _refuse_step(self, path: str, step: int) -> None:
        # Like any malformed record: kept out of every storage alike (PostgreSQL's column is 32-bit).
        self._skipped.setdefault(f"{path}#steps", f"{path}: step {step} is beyond the storage's range "
                                 f"(0..{protocol.MAX_STEP}); reports with such steps are refused")

    def _scan(self, path: str, tail: LineTail, *, final: bool,
              use: Callable[[Scan], bool | None]) -> tuple[Scan, bool | None] | None:
        """Open ``path`` (a regular file only), read it on from where ``tail`` ended and hand the
        read to ``use``; the read is kept (``tail`` moves on) unless ``use`` returns ``None``.
        ``None`` if the file cannot be read."""
        try:
            fd = files.open_regular(path, os.O_RDONLY)
        except files.NotRegularFileError as err:
            self._skip(path, err.strerror or "not a regular file")
            return None
        except FileNotFoundError:
            return None
        except OSError as err:
            self._read_error = f"cannot read {path}: {err}"
            return None
        try:
            scan = tail.scan(fd, os.fstat(fd), max_line_bytes=MAX_LINE_BYTES,
                             max_scan_bytes=None if final else MAX_SCAN_BYTES)
            result = use(scan)
        except OSError as err:
            self._read_error = f"cannot read {path}: {err}"
            return None
        finally:
            os.close(fd)
        if result is not None:
            tail.commit(scan)
            self._note_junk(path, scan, final=final)
        return scan, result

    def _poll_hypertune(self, *, final: bool = False) -> bool:
        self._ht_deferred = False
        self._ht_taken = 0
        st = self._stat(self.hypertune_path)
        if st is None:
            return False
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        if sig == self._ht_sig:
            if final:
                self._note_cut(st.st_size)
            return False  # unchanged: the common, cheap case
        racy = not final and time.time_ns() - st.st_mtime_ns < RACY_WINDOW_NS
        read = self._scan(self.hypertune_path, self._ht_tail, final=final,
                          use=lambda scan: self._add_hypertune(scan, settled=not racy))
        if final:
            self._note_cut(st.st_size)
        if read is None:
            return False
        scan, changed = read
        first_seen = not self._ht_exists
        self._ht_exists = True
        if changed is None:
            self._ht_sig = None
            self._ht_deferred = st.st_size <= REREAD_MAX_BYTES
            return first_seen  # torn in the middle of a rewrite: the next poll reads it whole
        self._ht_sig = sig if scan.at_eof and not racy else None
        return changed or first_seen

    def _add_hypertune(self, scan: Scan, *, settled: bool) -> bool | None:
        """Take in one read of the file; ``None`` if it is left for a later read to settle.

        A read that goes on from the last one (the file grew) takes its complete lines. A read of
        the whole file (new, or rewritten) that is torn is skipped unless the file has settled
        (then its bad tail is garbage, not a write in progress); so is a short read that could be
        a fresh file or a partial rewrite.
        """
        n_records = 0
        first: tuple[bool, HypertuneLine | None] | None = None  # (read before?, its first metric)
        new: list[HypertuneLine] = []
        new_raws: list[str] = []
        last_ok = False
        any_line = False
        for data in scan.lines():
            raw = data.decode("utf-8", errors="replace").strip()
            if not raw:
                continue
            any_line = True
            if raw in self._ht_raw_seen:  # most lines of a rewrite were read before: skip parsing
                first = first or (True, None)
                n_records += 1
                last_ok = True
                continue
            lines = parse_hypertune_line(raw)
            last_ok = lines is not None
            if lines is None:
                continue  # torn or foreign
            if first is None:
                first = (bool(lines) and self._key(lines[0]) in self._ht_seen,
                         lines[0] if lines else None)
            n_records += 1
            new_raws.append(raw)
            new.extend(lines)
        if not any_line and not scan.continued:
            self._ht_entries = 0
            self._ht_deferred = not settled
            return False  # between truncation and the first write: 90 % of reads under load
        if not scan.continued and not settled and scan.at_eof and (scan.torn or not last_ok):
            return None  # (a read cut at MAX_SCAN_BYTES is not torn: the next poll reads on)
        if first is not None and not first[0] and first[1] is not None and not scan.continued:
            # The oldest entry of this read was never read before. Every entry read so far is older
            # (reads are prefixes of rewrites, oldest first), so reports in between may be lost.
            if n_records >= HYPERTUNE_MAX_ENTRIES:
                self._gaps.append((self._ht_last_step, first[1].step))  # overflowed since
            elif self._ht_last_step is not None:
                # Short: a new process's fresh file, or the first chunk of an overflowed file's
                # rewrite (the library writes 8 KiB chunks at line ends). Only a settled file is
                # surely whole; until then wait for a read that tells them apart.
                if not settled:
                    return None
                self._start_attempt()  # a restart nobody told us about: a fresh file, not a loss
        self._ht_raw_seen.update(new_raws)  # only now: a read left for later must be parsed again
        self._ht_taken = len(new_raws)  # (reports, the unit of the file's cap: one may hold several tags)
        self._ht_entries = (self._ht_entries if scan.continued else 0) + n_records
        self._ht_most = max(self._ht_most, self._ht_entries)  # (a read in the middle of a rewrite holds fewer)
        measurements: list[Measurement] = []
        changed = False
        for line in new:
            key = self._key(line)
            if key in self._ht_seen:
                continue
            if line.step > protocol.MAX_STEP:
                self._refuse_step(self.hypertune_path, line.step)
                continue
            self._ht_seen.add(key)
            self._reported.add(line.tag)
            self._note_other(line.tag, line.step, line.value)
            self._ht_last_step = line.step  # the file is oldest first: the last new line is newest
            changed = True
            if not self.metric_ids or line.tag in self.metric_ids:
                measurements.append(Measurement(step=line.step, metrics={line.tag: line.value},
                                                timestamp=line.timestamp, attempt=self._attempt))
        self._add(self._ht_log, measurements)
        return changed

    def _start_attempt(self) -> None:
        # attempt n -> n+1: the shrinking file is a new queue, not lost steps
        self._attempt += 1
        self._ht_last_step = None
        self._ht_entries = self._ht_most = 0

    def _note_cut(self, size: int) -> None:
        """After the file's writer ended (a final read): cloudml-hypertune truncates its file and writes
        every entry again at each report, and a whole rewrite never holds fewer entries than an earlier
        one of the same process. An empty file, or fewer entries than read before, is a rewrite the
        process's death cut short (seen when a controller was SIGKILLed and its trainers died with
        it): the report being written, and any not read before, are gone."""
        if size == 0:
            what = "was empty"
        elif self._ht_entries < self._ht_most:
            what = f"held {self._ht_entries} of its {self._ht_most} entries"
        else:
            return
        note = (f"{self.hypertune_path} {what} after its process ended, as when a process dies while "
                f"cloudml-hypertune rewrites the file: the report being written, and any not read before, are lost; "
                f"report through the trials runtime for a lossless {protocol.METRICS_LOG}")
        self._ht_most = self._ht_entries  # (said once for this cut)
        if note not in self._cut:
            self._cut.append(note)

    @staticmethod
    def _key(line: HypertuneLine) -> tuple[object, ...]:
        return _entry_key(line.tag, line.step, line.timestamp, line.value)

    # --- metrics.jsonl ------------------------------------------------------------------------
    def _poll_metrics_log(self, *, final: bool = False) -> bool:
        st = self._stat(self.metrics_log_path)
        if st is None:
            return False
        if (st.st_ino, st.st_size) == self._jl_sig:
            return False  # append-only: no new byte means no new line
        # (replaced or truncated: read again from the start; entries already read are kept)

        def use(scan: Scan) -> bool:
            records = [m for line in scan.lines()
                       if (m := parse_record(line.decode("utf-8", errors="replace"))) is not None]
            return self._add_metrics_log(records)

        read = self._scan(self.metrics_log_path, self._jl_tail, final=final, use=use)
        if read is None:
            return False
        scan, changed = read
        first_seen = not self._jl_exists
        self._jl_exists = True
        self._jl_sig = (st.st_ino, st.st_size) if scan.at_eof else None
        return bool(changed) or first_seen

    def _add_metrics_log(self, records: list[Measurement]) -> bool:
        new: list[Measurement] = []
        changed = False
        for m in records:
            if m.step > protocol.MAX_STEP:
                self._refuse_step(self.metrics_log_path, m.step)
                continue
            kept = {}
            for tag, value in m.metrics.items():
                key = _entry_key(tag, m.step, m.timestamp, value) + (m.attempt,)
                if key in self._jl_seen:
                    continue
                self._jl_seen.add(key)
                self._reported.add(tag)
                self._note_other(tag, m.step, value)
                changed = True
                if not self.metric_ids or tag in self.metric_ids:
                    kept[tag] = value
            if kept and len(kept) == len(m.metrics):
                new.append(m)  # the common case: nothing to filter
            elif kept:
                new.append(Measurement(step=m.step, metrics=kept, timestamp=m.timestamp,
                                       attempt=m.attempt))
        self._add(self._jl_log, new)
        return changed

    # --- merge ----------------------------------------------------------------------------------
    def _add(self, log: MeasurementLog, measurements: list[Measurement]) -> None:
        self._dirty.update(log.add(measurements))

    @property
    def repeated_steps_warning(self) -> str | None:
        """Said when a metric was reported twice at one step (reports without ``global_step`` are
        all at step 0): each report is kept as its own measurement, in report order."""
        log = self._jl_log if self._jl_exists else self._ht_log
        if not log.repeats:
            return None
        return (f"{log.repeats} report{'s' if log.repeats > 1 else ''} repeated a step already "
                f"reported (reports without global_step are all at step 0): each is kept as its own "
                f"measurement in report order, but early stopping sees only the first of a step; "
                f"pass global_step (hypertune) or the step (ctx.report) to number them")

    def _merge(self) -> None:
        """Rebuild the changed measurements: :func:`merge_step` of each key."""
        jl, ht = self._jl_log.by_key, self._ht_log.by_key
        for key in sorted(self._dirty):
            stored = self._stored.get(key)
            m = merge_step(stored, ht.get(key), jl.get(key))
            if m is None:
                continue
            if stored is not None:
                self._stored_conflicts.update((key, tag) for tag in conflicting(stored, m))
            if key not in self._merged:
                if self._order and key < self._order[-1]:
                    bisect.insort(self._order, key)
                else:
                    self._order.append(key)
            self._merged[key] = m.with_elapsed(self.start_time)
        self._dirty.clear()
        self._cache = [self._merged[k] for k in self._order]


def merge_step(stored: Measurement | None, hypertune: Measurement | None,
               jsonl: Measurement | None) -> Measurement | None:
    """One step's measurement from its three sources (pure): per metric, ``metrics.jsonl`` wins over
    the hypertune file, and both (read by this controller, so reported later) over what the
    storage held; a stored step keeps its stored elapsed time (measured from the trial's first
    start, not this controller's).

    Example:
        >>> merge_step(Measurement(step=2, metrics={"a": 1.0, "b": 2.0}, elapsed_s=0.6),
        ...            Measurement(step=2, metrics={"a": 1.5}, timestamp=9.0), None)
        Measurement(step=2, metrics={'a': 1.5, 'b': 2.0}, timestamp=None, elapsed_s=0.6, attempt=0)
    """
    read: Measurement | None
    if jsonl is None or hypertune is None:
        read = jsonl if hypertune is None else hypertune
    elif hypertune.metrics.keys() <= jsonl.metrics.keys():
        read = jsonl
    else:
        read = Measurement(step=jsonl.step, metrics={**hypertune.metrics, **jsonl.metrics},
                           timestamp=jsonl.timestamp, attempt=jsonl.attempt)
    if stored is None or read is None:
        return read or stored
    if stored.elapsed_s is None:
        return Measurement(step=read.step, metrics={**stored.metrics, **read.metrics},
                           timestamp=read.timestamp, attempt=read.attempt)
    return Measurement(step=read.step, metrics={**stored.metrics, **read.metrics},
                       elapsed_s=stored.elapsed_s, attempt=read.attempt)


def conflicting(earlier: Measurement, merged: Measurement) -> list[str]:
    """The metrics of ``earlier`` whose value ``merged`` replaced with a different one (pure)."""
    return [tag for tag, v in earlier.metrics.items()
            if tag in merged.metrics and not same_value(v, merged.metrics[tag])]
