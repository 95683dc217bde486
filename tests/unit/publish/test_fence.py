"""The single-writer fence: one instance per checkpoint and per landing zone (issue 13, item 2).

Each fence test runs with the landing zone in a local folder (``flock``) and on OneLake, the DFS test
double (a real blob lease through ``DataLakeLeaseClient``); the checkpoint is a local folder, as in
``run``. Before the fence a second instance started without complaint, and its start-up clean-up
deleted the first one's uploads in flight.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError
from azure.storage.filedatalake import DataLakeLeaseClient

from connector.commands.cli import main
from connector.commands.convert import convert
from connector.config import load_settings
from connector.errors import WriterFenced
from connector.events import KafkaRecord
from connector.kcat import kcat_line
from connector.publish.fence import CHECKPOINT_LOCK, LANDING_LOCK, WriterFence
from connector.storage.base import Storage, WriterIdentity
from connector.storage.errors import StorageError
from connector.storage.local import LocalStorage
from connector.storage.onelake import OneLakeStorage
from connector.storage.onelake.lease import OneLakeLease
from tests.support.dfs_server import DfsTestServer, FaultPlan, make_onelake_storage
from tests.support.landing import WORKSPACE, Landing, unique_item_root

CREATE = b'{"op":"c","after":{"id":1,"name":"a"},"source":{}}'


def fence(landing: Landing, checkpoint: Path) -> WriterFence:
    return WriterFence(landing.storage, LocalStorage(checkpoint))


def test_a_second_fence_on_the_same_checkpoint_and_landing_zone_is_refused_naming_the_holder(
    landing: Landing, tmp_path: Path
) -> None:
    first = fence(landing, tmp_path / "cp").acquire()
    second = fence(landing, tmp_path / "cp")
    with pytest.raises(WriterFenced) as refused:
        second.acquire()
    holder = first.holder
    message = str(refused.value)
    assert holder.instance in message and f"pid {holder.pid}" in message and holder.host in message
    assert holder.started in message
    assert refused.value.holder == holder.describe()
    assert str(tmp_path / "cp") in message  # the checkpoint is locked first, so it is the one named
    # The first still writes; the refused one writes nothing.
    first.landing.create("t/00000000000000000001.parquet", b"x")
    with pytest.raises(WriterFenced):
        second.landing.create("t/00000000000000000002.parquet", b"y")
    assert not landing.storage.exists("t/00000000000000000002.parquet")
    first.release()


def test_released_fence_can_be_taken_by_the_next_instance(landing: Landing, tmp_path: Path) -> None:
    with fence(landing, tmp_path / "cp") as first:
        first.landing.create("a", b"1")
    # The lock files stay (removing them would let two instances lock different files), held by nobody.
    assert landing.storage.exists(LANDING_LOCK) and (tmp_path / "cp" / CHECKPOINT_LOCK).exists()
    with fence(landing, tmp_path / "cp") as second:
        second.landing.create("b", b"2")
        second.checkpoint.create("ledger/x", b"3")
    with pytest.raises(WriterFenced):
        second.landing.create("c", b"4")  # a released fence writes nothing


def test_a_different_checkpoint_on_the_same_landing_zone_is_refused(landing: Landing, tmp_path: Path) -> None:
    with fence(landing, tmp_path / "cp-a") as first:
        with pytest.raises(WriterFenced) as refused:
            fence(landing, tmp_path / "cp-b").acquire()
        assert first.holder.instance in str(refused.value)
        assert landing.storage.url in str(refused.value)  # the landing zone's lock is the one taken
        # The refused instance released the checkpoint it had locked: another landing zone can use it.
        other = LocalStorage(tmp_path / "lz-c")
        with WriterFence(other, LocalStorage(tmp_path / "cp-b")):
            pass


def test_a_different_landing_zone_on_the_same_checkpoint_is_refused(landing: Landing, tmp_path: Path) -> None:
    with fence(landing, tmp_path / "cp"), pytest.raises(WriterFenced):
        WriterFence(LocalStorage(tmp_path / "other-lz"), LocalStorage(tmp_path / "cp")).acquire()


def test_local_lock_file_records_the_holder(tmp_path: Path) -> None:
    holder = WriterIdentity.of_this_process()
    lease = LocalStorage(tmp_path).acquire_lease("writer.lock", holder)
    assert WriterIdentity.from_fields(json.loads((tmp_path / "writer.lock").read_text())) == holder
    lease.check()
    lease.release()
    assert (tmp_path / "writer.lock").read_bytes() == b""  # nobody holds it now
    lease.release()  # twice is harmless
    with pytest.raises(WriterFenced):
        lease.check()


def test_a_checkpoint_that_is_a_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "cp").write_text("not a folder")
    with pytest.raises(StorageError, match=str(tmp_path / "cp")):
        LocalStorage(tmp_path / "cp").acquire_lease(CHECKPOINT_LOCK, WriterIdentity.of_this_process())


# -- wiring: convert takes the fence before the sink's clean-up -------------------------------------------


def leftovers(storage: Storage) -> dict[str, bytes]:
    """An upload in flight of the running instance: a ``_tmp_`` and a ``_staged_`` file in a table folder."""
    files = {
        "public.schema/t/_tmp_0123456789abcdef.part": b"in flight",
        "public.schema/t/_staged_7_00000000000000000001.parquet": b"staged",
    }
    for path, data in files.items():
        storage.create(path, data)
    return files


def test_convert_refused_while_another_instance_writes_touches_nothing(landing: Landing, tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(kcat_line(KafkaRecord("db.public.t", 0, 0, b'{"id":1}', CREATE)))
    with fence(landing, tmp_path / "cp") as running:
        files = leftovers(running.landing)
        running.checkpoint.replace("ledger/state.json", b'{"last_committed_batch": 7}')
        with pytest.raises(WriterFenced):
            convert([str(dump)], load_settings(**{"landing_zone.url": landing.url}), checkpoint=str(tmp_path / "cp"))
        with pytest.raises(WriterFenced):
            # Its own scratch ledger: refused too.
            convert([str(dump)], load_settings(**{"landing_zone.url": landing.url}), checkpoint=None)
        assert {path: landing.storage.read_bytes(path) for path in files} == files
        assert (tmp_path / "cp" / "ledger" / "state.json").read_bytes() == b'{"last_committed_batch": 7}'
    # Once the first instance is gone, convert runs (and its clean-up is then allowed to remove them).
    summary = convert([str(dump)], load_settings(**{"landing_zone.url": landing.url}), checkpoint=str(tmp_path / "cp2"))
    assert summary.rows == 1


def test_convert_cli_refusal_is_one_error_line_and_exit_2(
    landing: Landing, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(kcat_line(KafkaRecord("db.public.t", 0, 0, b'{"id":1}', CREATE)))
    with fence(landing, tmp_path / "cp-a") as running:
        args = ["convert", "--input", str(dump), "--landing-zone", landing.url, "--checkpoint", str(tmp_path / "cp")]
        assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert running.holder.instance in err[0] and "another connector instance" in err[0]


# -- OneLake: the lease itself ----------------------------------------------------------------------------


@pytest.fixture
def onelake(dfs_server: DfsTestServer) -> OneLakeStorage:
    return make_onelake_storage(dfs_server, unique_item_root(), filesystem=WORKSPACE)


def lease_client(storage: OneLakeStorage, path: str = LANDING_LOCK) -> DataLakeLeaseClient:
    """A lease client of another party on the same file."""
    return DataLakeLeaseClient(storage._fs.get_file_client(f"{storage.location.root}/{path}"))


def test_onelake_lease_records_the_holder_in_the_file_metadata(onelake: OneLakeStorage) -> None:
    holder = WriterIdentity.of_this_process()
    lease = onelake.acquire_lease(LANDING_LOCK, holder)
    try:
        props = onelake._fs.get_file_client(f"{onelake.location.root}/{LANDING_LOCK}").get_file_properties()
        assert props.lease.state == "leased" and props.lease.status == "locked" and props.lease.duration == "fixed"
        assert WriterIdentity.from_fields(dict(props.metadata)) == holder
    finally:
        lease.release()
    props = onelake._fs.get_file_client(f"{onelake.location.root}/{LANDING_LOCK}").get_file_properties()
    assert props.lease.state == "available"
    assert WriterIdentity.from_fields(dict(props.metadata)) is None  # nobody holds it now


def test_onelake_lease_file_cannot_be_changed_or_deleted_by_another_party(onelake: OneLakeStorage) -> None:
    lease = onelake.acquire_lease(LANDING_LOCK, WriterIdentity.of_this_process())
    try:
        with pytest.raises(StorageError, match="412 LeaseIdMissing"):
            onelake.delete(LANDING_LOCK)
        other = lease_client(onelake)
        with pytest.raises(ResourceExistsError) as taken:
            other.acquire(lease_duration=15)
        assert taken.value.error_code == "LeaseAlreadyPresent"
        client = onelake._fs.get_file_client(f"{onelake.location.root}/{LANDING_LOCK}")
        with pytest.raises(HttpResponseError) as mismatch:
            client.set_metadata({"writer_instance": "intruder"}, lease=other)
        assert (mismatch.value.status_code, mismatch.value.error_code) == (412, "LeaseIdMismatchWithBlobOperation")
        with pytest.raises(HttpResponseError) as missing:
            client.set_metadata({"writer_instance": "intruder"})
        assert (missing.value.status_code, missing.value.error_code) == (412, "LeaseIdMissing")
        with pytest.raises(HttpResponseError) as renew:
            other.renew()
        assert renew.value.error_code == "LeaseIdMismatchWithLeaseOperation"
    finally:
        lease.release()


def test_onelake_lease_broken_by_an_operator_stops_publishing(onelake: OneLakeStorage, tmp_path: Path) -> None:
    landing = Landing("onelake", onelake, "")
    running = fence(landing, tmp_path / "cp").acquire()
    running.landing.create("t/00000000000000000001.parquet", b"1")
    # An operator breaks the lease (to let another instance in); the next renewal finds out.
    assert lease_client(onelake).break_lease(lease_break_period=0) == 0
    lease = next(x for x in running._leases if isinstance(x, OneLakeLease))
    lease.renew()
    with pytest.raises(WriterFenced, match="lease .* was lost .*LeaseIsBrokenAndCannotBeRenewed"):
        running.landing.create("t/00000000000000000002.parquet", b"2")
    with pytest.raises(WriterFenced):
        running.checkpoint.replace("ledger/state.json", b"{}")
    assert not onelake.exists("t/00000000000000000002.parquet")
    assert not (tmp_path / "cp" / "ledger" / "state.json").exists()
    # The next instance (new checkpoint lock: the first still holds its own) can take over.
    running_checkpoint_free = WriterFence(onelake, LocalStorage(tmp_path / "cp-next"))
    with running_checkpoint_free as successor:
        successor.landing.create("t/00000000000000000002.parquet", b"2")
    running.release()


def test_onelake_renewal_failing_transiently_keeps_the_lease(tmp_path: Path) -> None:
    with DfsTestServer(seed=5) as server:
        storage = make_onelake_storage(server, unique_item_root(), filesystem=WORKSPACE)
        lease = storage.acquire_lease(LANDING_LOCK, WriterIdentity.of_this_process())
        server.set_faults(FaultPlan(transient_rate=1.0, operations=frozenset({"lease"})))
        lease.renew()  # every attempt answered 429/503: not a refusal, so the lease is not lost
        assert server.injected
        lease.check()
        server.set_faults()
        lease.renew()
        lease.check()
        lease.release()
        with pytest.raises(WriterFenced):
            lease.check()
        # Released on the service: someone else acquires at once.
        other = lease_client(storage)
        other.acquire(lease_duration=15)
        other.release()
        storage.close()
