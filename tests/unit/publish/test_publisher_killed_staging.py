"""A task killed while it stages a file leaves nothing once its batch commits (an executor lost mid-batch)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from connector.landing_zone.layout import staged_file_name
from connector.publish.publisher import remove_orphans
from connector.storage.errors import StorageError
from connector.storage.local import LocalStorage


def stage_and_die(root: Path, path: str) -> None:
    """Write a staged file the way a task does, and be killed by SIGKILL after the bytes and before the end."""

    def killed(_fd: int) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    os.fsync = killed  # this process only: it dies in the write, as an executor killed mid-task does
    LocalStorage(str(root)).write_aside(path, b"half of a staged Parquet file")


def test_a_staged_write_killed_midway_is_removed_with_its_batch_s_failed_attempts(tmp_path: Path) -> None:
    folder = "public.schema/customers"
    staged = f"{folder}/{staged_file_name(7, ('db.public.customers', 0, 120), 0, 'a1b2', 'parquet')}"
    next_batch = f"{folder}/{staged_file_name(8, ('db.public.customers', 0, 300), 0, 'c3d4', 'parquet')}"
    storage = LocalStorage(str(tmp_path))
    storage.write_aside(next_batch, b"the next batch, staging already")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child is killed before it returns
        stage_and_die(tmp_path, staged)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert sorted(p.name for p in (tmp_path / folder).iterdir()) == sorted([Path(staged).name, Path(next_batch).name])
    assert remove_orphans(storage, folder, 7) == 1
    assert [info.path for info in storage.list_dir(folder)] == [next_batch]  # the next batch's file is kept


def test_a_failed_staged_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    storage = LocalStorage(str(tmp_path))
    with pytest.raises(StorageError, match="No space left on device"):
        storage.write_aside("t/_staged_1_a.parquet", b"bytes")
    assert list((tmp_path / "t").iterdir()) == []
