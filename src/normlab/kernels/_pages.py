"""Large CPU outputs on transparent huge pages when they are fresh from the kernel (Linux).

torch's CPU allocator takes large blocks from glibc, which maps blocks of 32 MB and more
(less, by its moving threshold) afresh on every call, so a kernel's first store to each
4 KB page faults and the kernel zeroes it: 8192 faults for a 32 MB output, most of the
time of a normalization (8192 x 1024 float32 LayerNorm forward: 11.2 ms against 1.3 ms
into memory already touched). Where the system grants huge pages on request
(``/sys/kernel/mm/transparent_hugepage/enabled`` reads ``[madvise]``), an output of at
least :data:`MIN_BYTES` whose first 2 MB-aligned page is not yet resident (``mincore``) is
advised ``MADV_HUGEPAGE`` over its 2 MB-aligned interior before the kernel writes it, so it
faults once per 2 MB: 11.2 -> 4.3 ms there, F.layer_norm 9.3 ms (two threads, medians of
40, 2026-12-05). torch itself offers the same for all of its allocations
(``THP_MEM_ALLOC_ENABLE=1``). The advice covers only pages the kernel then writes in full,
so it adds no resident memory; memory already resident (a caching allocator, or glibc
with ``MALLOC_MMAP_MAX_=0``) is left alone, at the cost of one ``mincore`` call.

Caveat, measured on this VM: it reports free memory to its host (virtio-balloon free page
reporting, ``/sys/module/page_reporting``: every free block of order 9, i.e. 2 MB, with
``min_free_ms`` 0), so a huge page freed by one call may be back with the host before the
next call faults it in again. Then a call can wait for the host: 8192 x 1024 float32
LayerNorm forward with fresh outputs took 38 ms a call (median of 15) in a new process, 3.1
ms a little later (``F.layer_norm`` 9.3-10.1, ``clone`` 7.6-8.0). In ``normlab bench``'s
fresh-output table such waits hit one row or more in about half of six runs on 2026-12-05
and every float32 row in one of them: normlab's LayerNorm then read 0.55-0.90x
``F.layer_norm``, 2.0-3.3x in the rows not hit.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys
from pathlib import Path

import torch

__all__ = ["MIN_BYTES", "advise_huge", "fresh_output"]

#: Outputs below this size are not advised (normlab's choice, not measured: a block under
#: 4 MB holds at most one aligned 2 MB page, and glibc often serves it from its heap).
MIN_BYTES = 4 << 20
_HUGE = 2 << 20
_MADV_HUGEPAGE = 14


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """libc with ``madvise`` and ``mincore`` where huge pages are granted on request."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None
    if "[madvise]" not in mode:  # "[always]": already huge; "[never]": refused
        return None
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return libc


def advise_huge(t: torch.Tensor) -> bool:
    """Advise huge pages over the 2 MB-aligned interior of ``t``'s memory if its first page
    is not resident yet (a fresh mapping: none of it is); return whether it did."""
    libc = _libc()
    if libc is None or t.device.type != "cpu":
        return False
    start = t.data_ptr()
    lo = -(-start // _HUGE) * _HUGE
    hi = (start + t.numel() * t.element_size()) // _HUGE * _HUGE
    if hi <= lo:
        return False
    resident = ctypes.c_ubyte(0)
    if libc.mincore(lo, mmap.PAGESIZE, ctypes.byref(resident)) != 0 or resident.value & 1:
        return False
    return libc.madvise(lo, hi - lo, _MADV_HUGEPAGE) == 0


def fresh_output(like: torch.Tensor) -> torch.Tensor:
    """``torch.empty_like(like)``, on huge pages when large and fresh (above)."""
    out = torch.empty_like(like)
    if out.numel() * out.element_size() >= MIN_BYTES:
        advise_huge(out)
    return out
