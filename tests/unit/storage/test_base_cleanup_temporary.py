"""``Storage.cleanup_temporary`` on every backend: stale ``_tmp_*`` uploads go, everything else stays."""

from __future__ import annotations

from datetime import timedelta

from connector.storage.base import Storage

TEMPORARY = ["_tmp_root.part", "customers/_tmp_3f2a.part", "sales.schema/orders/_tmp_9b.part"]
KEPT = {
    "_partnerEvents.json": b"{}",
    "customers/_metadata.json": b'{"keyColumns": ["id"]}',
    "customers/00000000000000000001.parquet": b"data",
    "customers/_staged_4_00000000000000000002.parquet": b"staged",  # the ledger's business, not ours
    "customers/_ProcessedFiles/00000000000000000000.parquet": b"old",
    "sales.schema/orders/tmp_not_ours.parquet": b"x",
}


def walk(storage: Storage, folder: str = "") -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for entry in storage.list_dir(folder):
        if entry.is_dir:
            out.update(walk(storage, entry.path))
        else:
            out[entry.path] = storage.read_bytes(entry.path)
    return out


def test_cleanup_temporary_deletes_only_temporary_files(storage: Storage) -> None:
    for path, data in KEPT.items():
        storage.create(path, data)
    for path in TEMPORARY:
        storage.create(path, b"an upload a crash cut short")
    assert storage.cleanup_temporary(older_than=timedelta(hours=1)) == []  # all fresh: maybe in flight
    assert storage.cleanup_temporary("missing/folder") == []
    assert storage.cleanup_temporary("customers") == ["customers/_tmp_3f2a.part"]
    assert sorted(storage.cleanup_temporary()) == ["_tmp_root.part", "sales.schema/orders/_tmp_9b.part"]
    assert walk(storage) == KEPT
    assert storage.cleanup_temporary() == []
