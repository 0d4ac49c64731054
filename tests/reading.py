"""What a user reads in a command's output, whatever the terminal's width.

Titles, notes, warnings and errors wrap at spaces to the terminal (COLUMNS, else its size, else 80), and a
path longer than a line stands whole on a line of its own: `flat` joins the lines back into the one line a
user reads, so a test asserts on the words, not on where a line happened to break. Assert values on csv or
json, and on wrapped lines only where the wrapping itself is what is tested.
"""

from __future__ import annotations


def flat(text: str) -> str:
    """`text` as one line: every run of spaces and line breaks as one space."""
    return " ".join(text.split())
