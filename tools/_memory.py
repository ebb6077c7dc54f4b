"""Memory figures the benchmarks report: peak RSS and private memory (``RssAnon``).

Peak RSS (``ru_maxrss``) counts file-backed pages of memory-mapped corpus files too;
``RssAnon`` does not, so it is the figure that shows whether a reader copies data.
"""

from __future__ import annotations

import resource

__all__ = ["peak_rss_mb", "rss_anon_mb", "status_kib"]


def status_kib(key: str) -> int:
    """Field ``key`` of ``/proc/self/status`` (e.g. ``"RssAnon"``, ``"VmRSS"``), in KiB.

    Raises
    ------
    KeyError
        The field is absent.
    OSError
        There is no ``/proc`` (not Linux).
    """
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def rss_anon_mb() -> float:
    """This process's private resident memory (``RssAnon``) in MiB; NaN off Linux."""
    try:
        return status_kib("RssAnon") / 1024
    except (KeyError, OSError):
        return float("nan")


def peak_rss_mb() -> float:
    """This process's peak resident set (``ru_maxrss``, KiB on Linux) in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
