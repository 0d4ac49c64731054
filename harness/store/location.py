"""Where the results database is: `--db`, else HARNESS_DB, else the default SQLite file; the file of a
sqlite URL, and how a URL is shown. Light: SQLAlchemy's URL parser is imported only when a URL is parsed, so
the command line checks where the database is before anything opens it.

HARNESS_DB set to the empty string is HARNESS_DB unset (`HARNESS_DB= harness runs` reads the default
database), as every HARNESS_* variable is read, and as click reads an option's variable and XDG_DATA_HOME is
read; one of spaces alone is refused: it named a file of that name in the current folder."""

from __future__ import annotations

import os
from pathlib import Path

from harness.core.errors import HarnessError, UsageError

DB_ENV = "HARNESS_DB"


def default_db_path() -> Path:
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "harness" / "results.sqlite"


def env_db() -> str | None:
    """HARNESS_DB, None where it is unset or empty; UsageError where it is spaces alone."""
    value = os.environ.get(DB_ENV)
    if value and not value.strip():
        raise UsageError(
            f"{DB_ENV}={value!r} is blank: give a database path or URL, or unset it for the default database"
        )
    if value and any(ord(c) < 32 or ord(c) == 127 for c in value):  # a line read with its end: '…sqlite\n'
        raise UsageError(
            f"{DB_ENV}={value!r} holds a control character (a line end read with the value?): give the path "
            "or URL alone"
        )
    return value or None


def resolve_url(db: str | None = None) -> str:
    """`--db` value, else HARNESS_DB, else the default SQLite file. Plain paths become sqlite URLs."""
    db = db or env_db() or str(default_db_path())
    if "://" in db:
        return db
    path = Path(db).expanduser()
    return f"sqlite:///{path.resolve()}"


def describe_url(url: str) -> str:
    """The URL without its password, for display; a URL without a password as it is (SQLAlchemy's rendering
    escapes a path's `:`, `@` and `%`: a --db /tmp/x@y.sqlite was said as /tmp/x%40y.sqlite)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    return url if parsed.password is None else parsed.render_as_string(hide_password=True)


def sqlite_file(url: str) -> Path | None:
    """The file of a sqlite:/// URL; None for other databases and in-memory SQLite."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    database = parsed.database
    if str(parsed.query.get("uri", "")).lower() in ("true", "1") and database.startswith("file:"):
        from urllib.parse import unquote, urlsplit

        # an SQLite URI filename (sqlite:///file:PATH?mode=ro&uri=true): its path, not a folder "file:"
        database = unquote(urlsplit(database).path)
        if not database or database == ":memory:":
            return None
    return Path(database).expanduser()


def in_memory(url: str) -> bool:
    """Whether `url` is SQLite in memory (sqlite://, sqlite:///:memory:, file::memory:…)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return False
    database = parsed.database or ""
    return parsed.get_backend_name() == "sqlite" and (
        database in ("", ":memory:") or database.startswith("file::memory:") or "mode=memory" in url
    )


def missing_database(file: Path) -> tuple[str, bool]:
    """What is true of a results database file that is not there, and whether `harness run` can create it
    (and the folders it lacks, as it does) where it is."""
    where, other = f"no results database at {file}", "--db or HARNESS_DB names another"
    folder = file.absolute().parent
    nearest = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
    missing = f", nor its folder {file.parent}" if nearest != folder else ""
    if not nearest.is_dir():
        return f"{where}: {nearest} is a file, not a folder: `harness run` cannot create it; {other}", False
    if not os.access(nearest, os.W_OK | os.X_OK):
        return (
            f"{where}{missing}, and {nearest} is not writable: `harness run` cannot create it; {other}",
            False,
        )
    made = "the folder and the database" if missing else "one"
    return f"{where}{missing} (`harness run` creates {made}; {other})", True


def named(db: str | None) -> str:
    """How a command names the database it was given: `HARNESS_DB=` where the value is HARNESS_DB's (click
    fills --db from it), else `--db `."""
    env = os.environ.get(DB_ENV)
    return f"{DB_ENV}=" if env and db in (None, env) else "--db "


def refuse_target(url: str, name: str = "--db ") -> None:
    """A --db (or HARNESS_DB: `name` says which) no command can use, a usage error (exit 2), said before
    anything is read or created: a database in memory, a folder."""
    file = sqlite_file(url)
    if file is None and in_memory(url):
        raise HarnessError(
            f"{name}{describe_url(url)} is a database in memory: what a command stores there is gone when it "
            "ends; give a file (--db results.sqlite)",
            exit_code=2,
        )
    if file is not None and file.is_dir():
        raise HarnessError(
            f"{name}{file} is a folder, not a database file; give a file in it, e.g. "
            f"--db {file / 'results.sqlite'}",
            exit_code=2,
        )
