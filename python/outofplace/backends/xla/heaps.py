"""glibc's heaps kept between calls: the XLA engine sets glibc's malloc so that a
thread's heap emptied by the end of a call is kept for the next, not unmapped.

XLA:CPU allocates a program's temporaries as one block at every call, on the thread that
runs the program, and frees it when the call ends. A program that calls eager's kernels
runs on a helper thread (kernel_home.h), whose glibc arena is not the main one: a block
its first heap cannot hold gets a heap of its own (64 MiB reserved), and glibc unmaps a
heap its frees leave empty unless the arena's top pad is at least a heap's size
(`heap_trim` in glibc's arena.c). So every call mapped the temporaries fresh: the 12.7M
Llama's AdamW step, 30.9 MB of them, took 7,560 page faults a call (20-34 ms of a
140-240 ms step). With the pad, the heap stays: 4 faults a call.

A pad set by `mallopt` also freezes glibc's dynamic mmap and trim thresholds where they
are (128 KiB at the start of a process), so both are set first to the values glibc's
own adjustment reaches (32 MiB and 64 MiB, after the first free of a 32 MiB block).
The setting is the process's, once, when the XLA engine makes its client; it is left as
it is where glibc is not the C library, where the user set glibc's malloc variables
(`MALLOC_ARENA_MAX`, `MALLOC_*_`, `GLIBC_TUNABLES`), and with OUTOFPLACE_KEEP_HEAPS=0.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os

logger = logging.getLogger("outofplace")

# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
# glibc's largest dynamic mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit), the
# trim threshold it sets beside it, and a non-main arena's heap size (HEAP_MAX_SIZE)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
TOP_PAD = 2 * MMAP_THRESHOLD

_USER_SETTINGS = ("MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                  "MALLOC_ARENA_MAX", "GLIBC_TUNABLES")


@functools.cache
def keep_heaps() -> bool:
    """Sets glibc's malloc to keep a thread's emptied heaps (the module's docstring), once
    a process; whether it did."""
    if os.environ.get("OUTOFPLACE_KEEP_HEAPS", "1") == "0":
        return False
    user = [name for name in _USER_SETTINGS if name in os.environ]
    if user:
        logger.debug("outofplace: glibc's malloc left as the user set it (%s)",
                     ", ".join(user))
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # (glibc's own: mallopt's parameters are glibc's)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    done = all(mallopt(parameter, value) == 1 for parameter, value in (
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        (_M_TOP_PAD, TOP_PAD)))
    logger.debug("outofplace: glibc's heaps kept between calls (top pad %d MiB)%s",
                 TOP_PAD >> 20, "" if done else ": mallopt refused a setting")
    return done
