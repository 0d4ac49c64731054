"""The results database: every run, its steps, and what profiling found. SQLAlchemy 2.0 ORM.

ResultsStore is made of one part per thing it stores (runs.py, configs.py, timings.py, baselines.py,
attention.py) over the opened database (database.py).

An embedded SQLite file by default; any SQLAlchemy URL through `--db` or `HARNESS_DB` (PostgreSQL with
`pip install 'harness[postgresql]'`).

- Ours or not: our databases carry a `harness_meta` table with the schema version (databases from before it
  are known by their `runs` and `step_timings` tables). A database that holds other tables and none of ours
  is never written to.
- Schema: a new database is created from harness.store.schema and stamped at the newest Alembic revision; one
  made by an older harness is upgraded to it on open (harness.store.migrations).
- Read-only commands (`runs`, `show`, `dashboard`, `doctor`) open with `readonly=True`: no folder or file
  is created, and SQLite files are opened with mode=ro; only a database made by an older harness is
  upgraded, through a separate writing connection, so that it can be read.
- A busy database is waited for (harness.store.dbfaults); a run it still will not take is written to
  `harness-unsaved-<run-id>.json` (harness.store.unsaved) and `save` raises UnsavedRun saying where.
  `import_file` stores such a file, every field checked (harness.store.unsaved_check); a stored run is
  replaced only when asked (`replace`), and importing the same file again writes nothing.
- A row changed outside the harness is refused in one line as it is read (harness.store.stored_check); a
  command's read over several runs leaves such a run out and says it after (harness.store.leaving).
"""

from __future__ import annotations

from harness.store.attention import AttentionPart
from harness.store.baselines import BaselinesPart
from harness.store.configs import ConfigsPart
from harness.store.database import Imported, NoDatabase, UnsavedRun
from harness.store.location import default_db_path, describe_url, resolve_url, sqlite_file
from harness.store.runs import RunsPart
from harness.store.schema import RUN_COLUMNS, Run
from harness.store.timings import TimingsPart

__all__ = [
    "RUN_COLUMNS",
    "Imported",
    "NoDatabase",
    "ResultsStore",
    "Run",
    "UnsavedRun",
    "default_db_path",
    "describe_url",
    "resolve_url",
    "sqlite_file",
]


class ResultsStore(RunsPart, ConfigsPart, TimingsPart, BaselinesPart, AttentionPart):
    """Open the results database; with readonly=False also create it (and its folder) where there is none."""
