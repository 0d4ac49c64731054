"""The trace cache under attack: an export rewritten with its size and mtime put back, a cache
folder that cannot be written or is a file, a limit that is not a size, a limit of 0. Stale numbers: a JSON
trace edited where the sampled digest does not read, a WAL export changed in its log, a user's folder as the
cache folder."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from export_data import commit_without_checkpoint
from kineto_data import write_trace
from reading import flat
from typer.testing import CliRunner

from analysis.tables.kernels import kernel_summary
from analysis.trace.cache import Cache, Entry
from analysis.trace.cache_files import remove_tree
from analysis.trace.digests import BLOCK, EDGE, WHOLE_FILE, content_digest
from analysis.trace.opening import open_trace
from harness.cli import app

pytestmark = pytest.mark.attack
runner = CliRunner()


def test_an_export_rewritten_with_size_and_mtime_put_back_is_read_again(
    a100_export: Path, tmp_path: Path, cache_dir: Path
) -> None:
    export = tmp_path / "report.sqlite"
    shutil.copy(a100_export, export)
    before = kernel_summary(open_trace(export))["Total Time (ns)"].sum()
    st = export.stat()
    with sqlite3.connect(export) as db:  # same rows, one kernel 1 µs longer: the file keeps its size
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 1000 WHERE rowid = 1")
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (export.stat().st_size, export.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    after = kernel_summary(open_trace(export))["Total Time (ns)"].sum()
    assert after == before + 1000
    assert len(Cache().entries()) == 1  # the stale entry went when the new one was made


def test_a_big_file_changed_in_a_sampled_block_gets_a_new_digest(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    data = bytearray(os.urandom(WHOLE_FILE * 3))
    path.write_bytes(data)
    first = content_digest(path, len(data))
    data[EDGE + (len(data) - 2 * EDGE) // 17] ^= 1  # the first block between head and tail
    path.write_bytes(data)
    assert content_digest(path, len(data)) != first
    data[-BLOCK] ^= 1
    path.write_bytes(data)
    assert content_digest(path, len(data)) != first


@pytest.mark.parametrize("blocker", ["file", "readonly"])
def test_max_size_on_a_cache_folder_that_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocker: str
) -> None:
    root = tmp_path / "cache"
    if blocker == "file":
        root.write_text("not a folder")
    else:
        root.mkdir()
        root.chmod(0o500)
        if os.access(root, os.W_OK):  # root: permissions are not enforced, so the write fails as it would

            def denied(path: Path, data: bytes) -> None:
                raise PermissionError(13, "Permission denied", str(path))

            monkeypatch.setattr("analysis.trace.cache.write_atomic", denied)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(root))
    try:
        result = runner.invoke(app, ["cache", "--max-size", "1GB"])
    finally:
        root.chmod(0o700) if root.is_dir() else None
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"cannot save the cache limit in {root}" in flat(result.output)
    if blocker == "file":
        assert root.read_text() == "not a folder"


def test_a_cache_limit_that_is_not_a_size_fails_clearly(
    a100_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A usage error (exit 2), as a mistake in any other setting is."""
    monkeypatch.setenv("HARNESS_CACHE_LIMIT", "abc")
    for args in (["kernels", str(a100_export)], ["cache"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert "HARNESS_CACHE_LIMIT='abc' is not a size" in result.output


def test_max_size_0_leaves_no_entry_and_caches_nothing_after(a100_export: Path, cache_dir: Path) -> None:
    """It says so: `cache limit set to 0 bytes; evicted N bytes` did not say that nothing is kept after."""
    assert runner.invoke(app, ["kernels", str(a100_export)]).exit_code == 0
    assert len(Cache().entries()) == 1
    size = Cache().entries()[0].size_bytes
    result = runner.invoke(app, ["cache", "--max-size", "0"])
    assert result.exit_code == 0 and Cache().entries() == []
    assert result.stderr.replace("\n      ", " ") == (
        "note: cache limit set to 0 bytes: nothing read from now on is kept (each command reads its export "
        f"afresh); evicted {size:,} bytes: the cache is empty\n"
    )
    table = runner.invoke(app, ["kernels", str(a100_export), "-f", "csv"])
    assert table.exit_code == 0 and Cache().entries() == []
    assert pd.read_csv(io.StringIO(table.stdout))["Instances"].sum() == 5


def test_a_limit_under_every_entry_says_so(a100_export: Path, cache_dir: Path) -> None:
    """`--max-size 1KB` evicted every entry and said only how many bytes."""
    assert runner.invoke(app, ["kernels", str(a100_export)]).exit_code == 0
    size = Cache().entries()[0].size_bytes
    result = runner.invoke(app, ["cache", "--max-size", "1KB"])
    assert result.exit_code == 0 and Cache().entries() == []
    assert result.stderr.replace("\n      ", " ") == (
        f"note: cache limit set to 1,000 bytes, under the size of every entry (the smallest {size:,} bytes); "
        f"evicted {size:,} bytes: the cache is empty\n"
    )
    again = runner.invoke(app, ["cache", "--max-size", "5GB"])
    assert again.stderr == "note: cache limit set to 5,000,000,000 bytes\n"


# --- stale numbers from the cache --------------------------------------------------------------------

ARGS = {"stream": 7, "correlation": 1, "device": 0, "grid": [2, 1, 1], "block": [128, 1, 1]}
KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 5, "args": ARGS}


def _big_json_trace(path: Path) -> tuple[Path, int]:
    """A plain JSON trace of 4,000 kernels (past WHOLE_FILE: its content is sampled) and the offset of a
    `"dur": 5` no sampled block reads."""
    events = [{**KERNEL, "ts": 10 * i, "args": {**ARGS, "correlation": i}} for i in range(4000)]
    write_trace(path, events)
    data = path.read_bytes()
    assert len(data) > WHOLE_FILE
    step = (len(data) - 2 * EDGE) // 17
    sampled = [(0, EDGE), (len(data) - EDGE, len(data))]
    sampled += [(EDGE + i * step, EDGE + i * step + BLOCK) for i in range(1, 17)]
    at = EDGE
    while True:
        at = data.index(b'"dur": 5', at + 1)
        if not any(lo - 16 <= at < hi for lo, hi in sampled):
            return path, at + len(b'"dur": ')


def _edit_in_place(path: Path, at: int, byte: bytes) -> None:
    """Change one byte of `path`, then put its mtime back (its size does not change)."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(byte)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


@pytest.mark.parametrize("racy", [True, False], ids=["just-written", "older"])
def test_a_json_trace_edited_where_no_sample_reads_with_size_and_mtime_put_back_is_read_again(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, racy: bool
) -> None:
    """cache.py's digest samples 16 blocks of a big file: an edit between them, with size and mtime put
    back, was served the old table. The key now holds the ctime (no program can put it back), and a file
    changed within RACY_NS of its key is also checked by its whole content ("older": that check off, the
    ctime alone)."""
    if not racy:
        monkeypatch.setattr("analysis.trace.cache.RACY_NS", 0, raising=False)
    path, at = _big_json_trace(tmp_path / "t.json")
    assert kernel_summary(open_trace(path))["Total Time (ns)"].sum() == 4000 * 5000
    _edit_in_place(path, at, b"9")
    served = open_trace(path)
    assert kernel_summary(served)["Total Time (ns)"].sum() == 3999 * 5000 + 9000
    assert served.source_reads or served.cache_entry is None or len(Cache().entries()) == 1


def test_an_entry_made_while_its_source_was_racy_is_checked_by_content(
    tmp_path: Path, cache_dir: Path
) -> None:
    """Two changes within one tick of the file system's clock share a ctime: the entry made after the
    first holds the whole file's hash, and a lookup that finds the same key (the same ctime) but other
    content drops the entry instead of serving it."""
    source = tmp_path / "t.bin"
    source.write_bytes(os.urandom(WHOLE_FILE * 2))
    first = Cache().entry(source, "v")
    assert first.whole is not None  # written just now: racy
    first.create({"format": "test"})
    assert first.meta() is not None
    _edit_in_place(source, WHOLE_FILE, b"\0" if source.read_bytes()[WHOLE_FILE] else b"\1")
    same_key = Entry(Cache(), first.folder, first.source, first.size, first.mtime_ns, None)  # ctime unchanged
    assert same_key.meta() is None and not first.folder.exists()
    again = Entry(Cache(), first.folder, first.source, first.size, first.mtime_ns, None)
    again.create({"format": "test"})  # made while racy: holds the hash of what was read
    assert "whole" not in json.loads((first.folder / "meta.json").read_text())


@pytest.mark.parametrize("index", [True, False], ids=["with-shm", "log-alone"])
def test_a_wal_export_with_committed_changes_is_read_with_them_and_nothing_is_left_beside_it(
    a100_export: Path, tmp_path: Path, cache_dir: Path, index: bool
) -> None:
    """Another process committed into the export's `-wal` (WAL mode) and did not checkpoint: `kernels` served
    the cached 5 instances while the export holds 10, and reading left `-shm` and `-wal` beside it."""
    folder = tmp_path / "exports"
    folder.mkdir()
    export = folder / "report.sqlite"
    shutil.copy(a100_export, export)
    with sqlite3.connect(export) as db:
        db.execute("PRAGMA journal_mode=wal")
    db.close()
    assert sorted(p.name for p in folder.iterdir()) == ["report.sqlite"]
    first, _ = _kernels(export)
    assert first["Instances"].sum() == 5
    assert sorted(p.name for p in folder.iterdir()) == ["report.sqlite"]  # nothing left beside it
    commit_without_checkpoint(export)
    if not index:
        (folder / "report.sqlite-shm").unlink()
    beside = sorted(p.name for p in folder.iterdir())
    for _ in range(2):  # and never from the cache
        table, err = _kernels(export)
        assert table["Instances"].sum() == 10 and table["Total Time (ns)"].sum() == 177_146_960
        assert "changes in report.sqlite-wal that are not in the file itself" in err.replace("\n      ", " ")
        assert sorted(p.name for p in folder.iterdir()) == beside


def _kernels(export: Path) -> tuple[pd.DataFrame, str]:
    result = runner.invoke(app, ["kernels", str(export), "-f", "csv"])
    assert result.exit_code == 0, result.output
    return pd.read_csv(io.StringIO(result.stdout)), result.stderr


def _users_folder(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A folder of the user's: their own config.json, a notes file, a project folder with a meta.json."""
    folder = tmp_path / "mine"
    (folder / "0123456789abcdef0123456789abcdef").mkdir(parents=True)
    (folder / "exports").mkdir()
    files = {
        "config.json": b'{"theme": "dark", "limit_bytes": 7}',
        "notes.txt": b"my notes",
        "0123456789abcdef0123456789abcdef/meta.json": b'{"source": "/x", "size": 1}',
        "exports/keep.sqlite": b"mine",
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder, files


@pytest.mark.parametrize(
    "args",
    [
        ["cache", "--max-size", "1GB"],
        ["cache", "--clear"],
        ["cache", "--max-size", "0"],
        ["cache"],
        ["kernels"],
    ],
    ids=["max-size", "clear", "max-size-0", "list", "kernels"],
)
def test_a_users_folder_as_the_cache_is_refused_and_kept(
    a100_export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """HARNESS_CACHE_DIR at a user's folder: `cache --max-size` overwrote its config.json (and `--clear` or
    eviction would remove folders that look like entries, and `exports/`)."""
    folder, files = _users_folder(tmp_path)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(folder))
    monkeypatch.delenv("HARNESS_CACHE_LIMIT", raising=False)
    result = runner.invoke(app, [*args, str(a100_export)] if args == ["kernels"] else args)
    assert result.exit_code == 1 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert f"the cache folder {folder} holds files the trace cache did not write" in text
    assert "set HARNESS_CACHE_DIR to a new or empty folder" in text
    assert {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} == set(files)
    assert all((folder / name).read_bytes() == data for name, data in files.items())


def test_a_cache_folder_from_before_the_tag_is_the_caches(
    a100_export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder holding only what the cache writes (entries, config.json, exports/) is tagged and used."""
    root = tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(root))
    monkeypatch.delenv("HARNESS_CACHE_LIMIT", raising=False)
    assert runner.invoke(app, ["kernels", str(a100_export)]).exit_code == 0
    (root / "CACHEDIR.TAG").unlink()
    (root / "exports").mkdir()
    assert runner.invoke(app, ["cache", "--max-size", "2GB"]).exit_code == 0
    assert (root / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert json.loads((root / "config.json").read_text()) == {"limit_bytes": 2 * 1000**3}
    assert len(Cache().entries()) == 1


def test_a_users_folder_inside_the_cache_folder_is_not_an_entry(
    a100_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eviction and --clear remove entries: a folder that only looks like one (a meta.json, a name that is
    not an entry's) is the user's, and stays."""
    assert runner.invoke(app, ["kernels", str(a100_export)]).exit_code == 0
    mine = cache_dir / "project"
    mine.mkdir()
    (mine / "meta.json").write_text('{"source": "/x", "size": 1}')
    assert [e.source for e in Cache().entries()] == [str(a100_export.resolve())]
    assert runner.invoke(app, ["cache", "--clear"]).exit_code == 0
    assert (mine / "meta.json").is_file() and Cache().entries() == []


def test_a_wal_export_named_through_a_link_is_read_with_its_log(
    a100_export: Path, tmp_path: Path, cache_dir: Path
) -> None:
    """SQLite keeps the log beside the file a link points to, not beside the link: looking beside the link
    found none, and the export was read `immutable=1`, without its changes."""
    real, links = tmp_path / "real", tmp_path / "links"
    real.mkdir()
    links.mkdir()
    export = real / "report.sqlite"
    shutil.copy(a100_export, export)
    with sqlite3.connect(export) as db:
        db.execute("PRAGMA journal_mode=wal")
    db.close()
    link = links / "report.sqlite"
    link.symlink_to(export)
    assert _kernels(link)[0]["Instances"].sum() == 5
    commit_without_checkpoint(export)
    table, err = _kernels(link)
    assert table["Instances"].sum() == 10
    assert "changes in report.sqlite-wal that are not in the file itself" in err.replace("\n      ", " ")
    assert sorted(p.name for p in links.iterdir()) == ["report.sqlite"]


def test_a_disk_that_fills_while_the_cache_is_written_leaves_the_numbers_whole(
    a100_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI once ran on a disk that filled up: every table that wrote its columns block by block failed with
    ENOSPC. The cache is only a copy: the command goes on from the export, says so once, leaves no part."""
    import pyarrow.parquet as pq

    def full(self: object, *args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(pq.ParquetWriter, "write_table", full)
        with open_trace(a100_export) as t:
            table = kernel_summary(t)
    assert table["Total Time (ns)"].tolist() == [88_573_480]
    said = [n for n in table.attrs["notes"] if "No space left on device" in n]
    assert len(said) == 1 and "nothing more was cached" in said[0]
    assert not list(cache_dir.glob("*/.tmp-*")) and not list(cache_dir.glob("*/kernels.*"))
    with open_trace(a100_export) as t:  # room again: read from the export, and cached this time
        assert kernel_summary(t)["Total Time (ns)"].tolist() == [88_573_480]
        assert t.source_reads
    assert list(cache_dir.glob("*/kernels.*.parquet"))


def test_a_disk_that_fills_while_summary_stages_its_tables_leaves_the_numbers_whole(
    a100_export: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harness summary` puts every frame in the cache before its first table (Trace.stage): on a full disk
    it ended in a traceback (OSError: No space left on device) where `harness kernels` went on. It prints
    the tables it prints without the cache, says once that nothing more was cached, and leaves no part."""
    import pyarrow.parquet as pq

    whole = runner.invoke(app, ["summary", str(a100_export), "--format", "csv", "--no-cache"])
    assert whole.exit_code == 0, whole.output

    def full(self: object, *args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(pq.ParquetWriter, "write_table", full)
        result = runner.invoke(app, ["summary", str(a100_export), "--format", "csv"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert result.stdout == whole.stdout
    said = [line for line in result.stderr.splitlines() if "No space left on device" in line]
    assert len(said) == 1 and "nothing more was cached" in result.stderr
    assert not list(cache_dir.glob("*/.tmp-*"))


def test_a_folder_that_will_not_go_is_named_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clear racing a command that fills the cache: the folder itself stays ("Directory not empty"). The
    reason is the folder's own, said once, as `cache --clear` names the folder before it: "could not remove
    X: X: Directory not empty" named it twice. A file inside that will not go is still named."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "entry").write_text("x")

    def stuck(path: str | Path, **handler: Any) -> None:
        fail = next(iter(handler.values()))
        fail(os.rmdir, os.fspath(path), OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY)))
        fail(os.unlink, os.path.join(path, "entry"), OSError(errno.EACCES, os.strerror(errno.EACCES)))

    monkeypatch.setattr(shutil, "rmtree", stuck)
    assert remove_tree(folder) == os.strerror(errno.ENOTEMPTY)

    def inside(path: str | Path, **handler: Any) -> None:
        next(iter(handler.values()))(
            os.unlink, os.path.join(path, "entry"), PermissionError(errno.EACCES, "no")
        )

    monkeypatch.setattr(shutil, "rmtree", inside)
    assert remove_tree(folder) == f"{folder / 'entry'}: no"
