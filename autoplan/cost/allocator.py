"""Keep the cost model's large temporaries on the heap instead of fresh pages from the kernel.

A batch of 2^16 layouts makes arrays of 512 KiB, above glibc's default mmap threshold (128 KiB,
raised dynamically only up to the last freed block), so each temporary of a batch evaluation
was mapped, page-faulted in and unmapped again: about a third of ``evaluate``'s CPU time was
kernel time (measured with ``os.times`` on a 35k-layout batch: 33–40 ms system of ~110 ms).
``keep_temporaries_on_heap`` raises glibc's ``M_MMAP_THRESHOLD`` to 32 MiB (its maximum on
64-bit, ``DEFAULT_MMAP_THRESHOLD_MAX``) and ``M_TRIM_THRESHOLD`` so that freed temporaries are
reused (mallopt(3)). It changes no number, only where memory comes from; the process keeps up
to ``TRIM_THRESHOLD_BYTES`` of freed heap instead of returning it at once. A no-op off glibc or
where ``AUTOPLAN_KEEP_MALLOC`` is set (leave the allocator as the process configured it).
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 256 << 20

_done: list[bool] = []


def keep_temporaries_on_heap() -> bool:
    """Tune glibc's malloc once per process (see the module docstring); True where it was tuned."""
    if not _done:
        _done.append(_tune())
    return _done[0]


def _tune() -> bool:
    if not sys.platform.startswith("linux") or os.environ.get("AUTOPLAN_KEEP_MALLOC"):
        return False
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
            return False  # musl and others: their own allocator, left alone
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                    and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    except OSError:
        return False
