"""The ``Storage`` contract, run unchanged against every backend (local disk and OneLake).

Any backend that passes this suite can hold a landing zone or checkpoint: invariant 1 of docs/guarantees.md
(a visible numbered file is complete and never overwritten) rests on ``create`` and ``rename_new``
refusing to replace anything.
"""

from __future__ import annotations

import os

import pytest

from connector.storage.base import FileInfo, Storage

PAYLOAD = os.urandom(200_000)


def walk(storage: Storage, folder: str = "") -> list[str]:
    """Every file under ``folder``, recursively, through the public interface only."""
    out: list[str] = []
    for info in storage.list_dir(folder):
        out.extend(walk(storage, info.path) if info.is_dir else [info.path])
    return sorted(out)


def no_temporary_files(storage: Storage) -> bool:
    return not [p for p in walk(storage) if p.rsplit("/", 1)[-1].startswith("_tmp_")]


# -- create / read ----------------------------------------------------------------------------------


def test_create_then_read_round_trips_bytes(storage: Storage) -> None:
    storage.create("orders/00000000000000000001.parquet", PAYLOAD)
    assert storage.read_bytes("orders/00000000000000000001.parquet") == PAYLOAD
    assert no_temporary_files(storage)


def test_create_makes_nested_folders(storage: Storage) -> None:
    storage.create("sales.schema/orders/sub/_metadata.json", b'{"keyColumns": ["id"]}')
    assert storage.read_bytes("sales.schema/orders/sub/_metadata.json") == b'{"keyColumns": ["id"]}'
    assert storage.list_dir("sales.schema") == [FileInfo("sales.schema/orders", 0, True)]


def test_create_empty_file(storage: Storage) -> None:
    storage.create("t/empty", b"")
    assert storage.read_bytes("t/empty") == b""
    assert storage.size("t/empty") == 0
    assert storage.exists("t/empty")


def test_create_never_overwrites(storage: Storage) -> None:
    storage.create("t/00000000000000000001.parquet", b"first")
    with pytest.raises(FileExistsError):
        storage.create("t/00000000000000000001.parquet", b"second, different and longer")
    assert storage.read_bytes("t/00000000000000000001.parquet") == b"first"
    assert no_temporary_files(storage)


def test_create_same_content_twice_still_refuses(storage: Storage) -> None:
    # Recognising "our own bytes" is the ledger's job, not the storage layer's: a second create fails.
    storage.create("t/00000000000000000001.parquet", b"same")
    with pytest.raises(FileExistsError):
        storage.create("t/00000000000000000001.parquet", b"same")


def test_write_aside_writes_in_place_with_no_temporary_file(storage: Storage) -> None:
    # A task killed mid-write must leave only its staged name, which the batch's clean-up of failed attempts
    # deletes: a ``_tmp_`` file aside would stay in the table folder until the next start.
    storage.write_aside("t/_staged_1_a.parquet", PAYLOAD)
    assert walk(storage) == ["t/_staged_1_a.parquet"]
    storage.rename_new("t/_staged_1_a.parquet", "t/00000000000000000001.parquet", size=len(PAYLOAD))
    assert storage.read_bytes("t/00000000000000000001.parquet") == PAYLOAD
    assert walk(storage) == ["t/00000000000000000001.parquet"]


def test_read_missing_file_raises_file_not_found(storage: Storage) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("nowhere/00000000000000000001.parquet")


def test_names_with_spaces_and_unicode(storage: Storage) -> None:
    path = "Sales Data.schema/Tâble №1/00000000000000000001.parquet"
    storage.create(path, b"x")
    assert storage.read_bytes(path) == b"x"
    assert [i.path for i in storage.list_dir("Sales Data.schema/Tâble №1")] == [path]


def test_paths_escaping_the_root_are_rejected(storage: Storage) -> None:
    with pytest.raises(ValueError, match="escapes"):
        storage.create("../outside", b"x")
    with pytest.raises(ValueError, match="escapes"):
        storage.read_bytes("t/../../outside")


# -- replace ----------------------------------------------------------------------------------------


def test_replace_creates_then_overwrites(storage: Storage) -> None:
    storage.replace("_checkpoint/state.json", b'{"batch": 1}')
    assert storage.read_bytes("_checkpoint/state.json") == b'{"batch": 1}'
    storage.replace("_checkpoint/state.json", b'{"batch": 22}')
    assert storage.read_bytes("_checkpoint/state.json") == b'{"batch": 22}'
    storage.replace("_checkpoint/state.json", b"")
    assert storage.read_bytes("_checkpoint/state.json") == b""
    assert walk(storage) == ["_checkpoint/state.json"]


# -- rename_new -------------------------------------------------------------------------------------


# The caller may name the source's size (a staged file's writer reported it): the contract is the same.
SIZE_KNOWN = pytest.mark.parametrize("size_known", [False, True], ids=["size-read", "size-given"])


@SIZE_KNOWN
def test_rename_new_moves_the_file(storage: Storage, size_known: bool) -> None:
    storage.create("_staging/batch-7/part-0.parquet", PAYLOAD)
    size = len(PAYLOAD) if size_known else None
    storage.rename_new("_staging/batch-7/part-0.parquet", "orders/00000000000000000007.parquet", size=size)
    assert storage.read_bytes("orders/00000000000000000007.parquet") == PAYLOAD
    assert not storage.exists("_staging/batch-7/part-0.parquet")
    assert storage.size("orders/00000000000000000007.parquet") == len(PAYLOAD)


def test_rename_new_into_a_folder_that_does_not_exist_yet(storage: Storage) -> None:
    storage.create("_staging/a", b"a")
    storage.rename_new("_staging/a", "new.schema/new_table/00000000000000000001.parquet")
    assert storage.read_bytes("new.schema/new_table/00000000000000000001.parquet") == b"a"


@SIZE_KNOWN
def test_rename_new_never_replaces_the_destination(storage: Storage, size_known: bool) -> None:
    storage.create("orders/00000000000000000001.parquet", b"published")
    storage.create("_staging/x", b"late duplicate")
    with pytest.raises(FileExistsError):
        storage.rename_new("_staging/x", "orders/00000000000000000001.parquet", size=14 if size_known else None)
    assert storage.read_bytes("orders/00000000000000000001.parquet") == b"published"
    assert storage.read_bytes("_staging/x") == b"late duplicate"


@SIZE_KNOWN
def test_rename_new_refuses_even_identical_content(storage: Storage, size_known: bool) -> None:
    storage.create("orders/00000000000000000001.parquet", b"same")
    storage.create("_staging/x", b"same")
    with pytest.raises(FileExistsError):
        storage.rename_new("_staging/x", "orders/00000000000000000001.parquet", size=4 if size_known else None)
    assert storage.exists("_staging/x")


@SIZE_KNOWN
def test_rename_new_missing_source(storage: Storage, size_known: bool) -> None:
    with pytest.raises(FileNotFoundError):
        storage.rename_new("_staging/missing", "orders/00000000000000000001.parquet", size=7 if size_known else None)
    assert not storage.exists("orders/00000000000000000001.parquet")


# -- size / exists ----------------------------------------------------------------------------------


def test_size_and_exists(storage: Storage) -> None:
    storage.create("t/f", b"12345")
    assert storage.size("t/f") == 5
    assert storage.exists("t/f")
    assert storage.size("t/missing") is None
    assert not storage.exists("t/missing")
    assert storage.size("missing-folder/f") is None


# -- list_dir ---------------------------------------------------------------------------------------


def test_list_dir_lists_direct_children_sorted(storage: Storage) -> None:
    storage.create("t/00000000000000000002.parquet", b"22")
    storage.create("t/00000000000000000001.parquet", b"1")
    storage.create("t/_metadata.json", b"{}")
    storage.create("t/_ProcessedFiles/00000000000000000000.parquet", b"old")
    assert storage.list_dir("t") == [
        FileInfo("t/00000000000000000001.parquet", 1, False),
        FileInfo("t/00000000000000000002.parquet", 2, False),
        FileInfo("t/_ProcessedFiles", 0, True),
        FileInfo("t/_metadata.json", 2, False),
    ]
    assert storage.list_dir("t/_ProcessedFiles") == [
        FileInfo("t/_ProcessedFiles/00000000000000000000.parquet", 3, False)
    ]


def test_list_dir_of_the_root(storage: Storage) -> None:
    storage.create("_partnerEvents.json", b"{}")
    storage.create("a/f", b"x")
    assert storage.list_dir("") == [FileInfo("_partnerEvents.json", 2, False), FileInfo("a", 0, True)]


def test_list_dir_of_a_missing_folder_is_empty(storage: Storage) -> None:
    assert storage.list_dir("nope") == []
    assert storage.list_dir("") == []


def test_list_dir_accepts_surrounding_slashes(storage: Storage) -> None:
    storage.create("t/f", b"x")
    assert storage.list_dir("t/") == storage.list_dir("t") == [FileInfo("t/f", 1, False)]


# -- delete / delete_tree ---------------------------------------------------------------------------


def test_delete_removes_one_file_and_ignores_missing(storage: Storage) -> None:
    storage.create("t/a", b"a")
    storage.create("t/b", b"b")
    storage.delete("t/a")
    storage.delete("t/a")
    storage.delete("never/existed")
    assert walk(storage) == ["t/b"]


def test_delete_tree_removes_everything_below(storage: Storage) -> None:
    storage.create("drop/a", b"a")
    storage.create("drop/sub/b", b"b")
    storage.create("keep/c", b"c")
    storage.delete_tree("drop")
    storage.delete_tree("drop")
    storage.delete_tree("never/existed")
    assert walk(storage) == ["keep/c"]
    assert [i.path for i in storage.list_dir("")] == ["keep"]


def test_recreated_folder_starts_empty(storage: Storage) -> None:
    storage.create("t/00000000000000000005.parquet", b"old")
    storage.delete_tree("t")
    storage.create("t/00000000000000000001.parquet", b"new")
    assert walk(storage) == ["t/00000000000000000001.parquet"]


# -- whole-protocol ---------------------------------------------------------------------------------


def test_publish_sequence_leaves_only_numbered_files(storage: Storage) -> None:
    storage.create("t/_metadata.json", b'{"keyColumns": ["id"]}')
    for n in range(1, 6):
        staged = f"_staging/{n}.parquet"
        storage.create(staged, f"batch {n}".encode())
        storage.rename_new(staged, f"t/{n:020d}.parquet")
    assert walk(storage) == [f"t/{n:020d}.parquet" for n in range(1, 6)] + ["t/_metadata.json"]
    assert [storage.read_bytes(f"t/{n:020d}.parquet") for n in range(1, 6)] == [
        f"batch {n}".encode() for n in range(1, 6)
    ]
