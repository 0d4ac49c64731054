"""`python -m harness.store.migrations revision "MESSAGE"`: a new, empty revision file in versions/,
numbered after
the newest; `python -m harness.store.migrations heads`: the newest revision. For developers, in a checkout."""

from __future__ import annotations

import sys

from alembic import command
from alembic.script import ScriptDirectory

from harness.store.migrations import config


def main(argv: list[str]) -> int:
    cfg = config()
    head = ScriptDirectory.from_config(cfg).get_current_head()
    if argv[:1] == ["heads"]:
        print(head)
        return 0
    if argv[:1] == ["revision"] and len(argv) == 2:
        number = f"{int(head or 0) + 1:04d}"
        command.revision(cfg, message=argv[1], rev_id=number)
        print(f"new revision {number}: set HEAD = {number!r} in harness/store/migrations/__init__.py")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
