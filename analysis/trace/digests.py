"""Digests of a source's content that name its cache entry: a sampled one (`content_digest`) always, the
whole file's (`whole_digest`) while the source is racy (analysis.trace.cache)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

WHOLE_FILE = 256 << 10  # sources up to this size are hashed whole
EDGE, BLOCK, BLOCKS = 64 << 10, 4 << 10, 16  # bigger ones: head and tail, and blocks spread between


def content_digest(path: Path, size: int) -> str:
    """A hash of the file's content: all of it up to WHOLE_FILE bytes, else head, tail and BLOCKS blocks
    between (about 200 KB read, ~0.3 ms warm). Raises OSError when the file cannot be read."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        if size <= WHOLE_FILE:
            h.update(f.read())
            return h.hexdigest()
        fd = f.fileno()
        h.update(os.pread(fd, EDGE, 0))
        step = (size - 2 * EDGE) // (BLOCKS + 1)
        for i in range(1, BLOCKS + 1):
            h.update(os.pread(fd, BLOCK, EDGE + i * step))
        h.update(os.pread(fd, EDGE, size - EDGE))
    return h.hexdigest()


def whole_digest(path: Path) -> str:
    """A hash of every byte of the file (BLAKE2b, read 1 MiB at a time). Raises OSError."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
