"""The generated blocks of the docs: a benchmark rewrites only the text between its two markers."""

from __future__ import annotations


def replace_block(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with the part between the ``begin`` and ``end`` marker lines replaced by ``body``.

    Raises ValueError naming the markers when either is missing (or they are out of order).
    """
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"the markers {begin!r} and {end!r} are missing")
    return text[: start + len(begin)] + "\n" + body + "\n" + text[stop:]
