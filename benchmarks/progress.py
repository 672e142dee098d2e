"""Progress and resource accounting every benchmark section gets for free.

A section that runs for minutes must say what it is doing: ``track`` wraps a section's loop and
prints one line per item to stderr (stdout keeps the report tables), with the section's elapsed
time and the process's resident memory, so a user sees both the progress and whether memory is
bounded. ``measure_section`` wraps a whole section: its wall time and the peak RSS sampled while
it ran (``ru_maxrss`` only ever grows over a process, so it cannot tell sections apart).
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

@dataclass
class _Current:
    """The section progress lines name, and when it started."""

    section: str = "benchmarks"
    started: float = 0.0
    peak_mib: float = 0.0

    def sample(self) -> float:
        """The RSS now, kept as the section's peak when higher."""
        now = rss_mib()
        self.peak_mib = max(self.peak_mib, now)
        return now


_current = _Current(started=time.perf_counter())


def rss_mib() -> float:
    """The process's resident memory now (MiB); its peak so far where /proc is missing."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return peak_rss_mib()


def peak_rss_mib() -> float:
    """The process's peak resident memory since it started (MiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def release_memory() -> float:
    """Collect garbage and hand freed heap pages back to the OS (glibc's ``malloc_trim``), so a
    section's peak RSS starts from what the process still holds, not from the high-water mark of
    the sections before it; returns the RSS after (MiB)."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    libc = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    if libc:
        try:
            ctypes.CDLL(libc).malloc_trim(0)
        except (OSError, AttributeError):
            pass
    return rss_mib()


def load_average() -> list[float] | None:
    """1, 5 and 15-minute load averages: on a shared machine they say how loaded the run was."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def note(text: str) -> None:
    """One progress line on stderr: section, elapsed time, RSS, then ``text``."""
    elapsed = time.perf_counter() - _current.started
    print(f"  [{_current.section} {elapsed:5.0f} s, RSS {_current.sample():,.0f} MiB] {text}", file=sys.stderr,
          flush=True)


def track(items: Iterable[T], label: Callable[[T], str] = str) -> Iterator[T]:
    """Yield ``items``, printing ``i/n label`` before each (the line says what is starting)."""
    sequence = list(items)
    for index, item in enumerate(sequence, 1):
        note(f"{index}/{len(sequence)} {label(item)}")
        yield item


@dataclass
class SectionRun:
    """What one section cost: wall seconds, peak RSS sampled while it ran, load at its start."""

    name: str
    seconds: float = 0.0
    peak_rss_mib: float = 0.0
    rss_before_mib: float = 0.0
    load_at_start: list[float] | None = None
    quick: bool = False

    def as_dict(self) -> dict[str, object]:
        return {"seconds": round(self.seconds, 1), "peak_rss_mib": round(self.peak_rss_mib, 1),
                "rss_before_mib": round(self.rss_before_mib, 1), "load_at_start": self.load_at_start,
                "quick": self.quick}


@contextmanager
def measure_section(name: str, quick: bool = False, interval: float = 0.25) -> Iterator[SectionRun]:
    """Time the block and sample its RSS every ``interval`` s on a daemon thread; progress lines
    printed inside carry ``name`` (each also samples the RSS). Child processes a section starts
    are not counted."""
    run = SectionRun(name, rss_before_mib=rss_mib(), load_at_start=load_average(), quick=quick)
    previous = (_current.section, _current.started, _current.peak_mib)
    _current.section, _current.started, _current.peak_mib = name, time.perf_counter(), run.rss_before_mib
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(interval):
            _current.sample()

    sampler = threading.Thread(target=sample, name=f"rss-{name}", daemon=True)
    sampler.start()
    started = time.perf_counter()
    try:
        yield run
    finally:
        stop.set()
        sampler.join()
        run.seconds = time.perf_counter() - started
        run.peak_rss_mib = max(_current.peak_mib, _current.sample())
        _current.section, _current.started, _current.peak_mib = previous
