"""Bad settings and broken surroundings end ``python -m connector`` with one ``error:`` line and exit 2.

Each case used to end in a Python traceback (or, for an unreachable broker, never end), and several only
after Spark had started. The command runs as its own process, as an operator runs it; the line must name
what to fix (file, variable, URL, path, port, broker) and never a secret. Every ``run`` case here is
refused before Spark starts, so none of them starts a JVM.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector.healing.query_failure import (
    BatchFailed,
    QueryFailed,
    SourceDataLost,
    explain_query_failure,
    report_query_failure,
)
from connector.storage.errors import StorageError
from connector.storage.local import LocalStorage
from tests.support.kafka import REPO_ROOT

SAMPLE = REPO_ROOT / "connector" / "sample"
# Bounded by the checks themselves; this only keeps a regression (a hang) from blocking the suite.
HANG_GUARD_S = 180


def connector(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, list[str], str]:
    """Run ``python -m connector ARGS``; return (exit code, the ``error:`` lines, all of stderr)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_")}
    environment["PYTHONPATH"] = str(REPO_ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "connector", *args],
        cwd=cwd or REPO_ROOT,
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    return result.returncode, errors, result.stderr


def assert_one_error(outcome: tuple[int, list[str], str], *named: str) -> str:
    code, errors, stderr = outcome
    assert "Traceback" not in stderr, stderr
    assert code == 2, stderr
    assert len(errors) == 1, stderr
    for text in named:
        assert text in errors[0], errors[0]
    return errors[0]


def run_args(tmp_path: Path, *extra: str) -> list[str]:
    """A ``run`` of the embedded sample that would work: each test breaks one thing."""
    return [
        "run",
        "--trigger",
        "available-now",
        "--metrics-port",
        "0",
        "--landing-zone",
        str(tmp_path / "lz"),
        "--checkpoint",
        str(tmp_path / "ckpt"),
        *extra,
    ]


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[object]:
    """Return ``mount(size, read_only)``: a real small or read-only filesystem (needs root, as in CI)."""
    mounted: list[Path] = []

    def mount(size: str = "1m", read_only: bool = False) -> Path:
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode != 0:
            # CI runs as root, like every machine of this project: a mount that fails is a broken setup.
            pytest.fail(f"cannot mount a tmpfs (the test needs root): {done.stderr.decode().strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


# --- configuration file and environment -------------------------------------------------------------


def test_invalid_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text("source:\n  topics: [unclosed\n")
    line = assert_one_error(connector(*run_args(tmp_path), "--config", str(config)), str(config), "line")
    assert "not valid YAML" in line


def test_yaml_that_is_not_a_mapping_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "list.yaml"
    config.write_text("- source\n- landing_zone\n")
    assert_one_error(connector(*run_args(tmp_path), "--config", str(config)), str(config), "mapping")


def test_config_that_is_a_folder_names_it(tmp_path: Path) -> None:
    assert_one_error(connector(*run_args(tmp_path), "--config", str(tmp_path)), str(tmp_path), "is a folder")


def test_bad_json_in_an_environment_variable_names_the_variable_not_the_value(tmp_path: Path) -> None:
    value = '{"sasl.jaas.config": "password=hunter2-planted" '  # unterminated object
    line = assert_one_error(
        connector(*run_args(tmp_path), env={"CONNECTOR_SOURCE__KAFKA_OPTIONS": value}),
        "CONNECTOR_SOURCE__KAFKA_OPTIONS",
        "not valid JSON",
    )
    assert "hunter2" not in line


def test_convert_reads_the_same_checks(tmp_path: Path) -> None:
    config = tmp_path / "scalar.yaml"
    config.write_text("just text\n")
    outcome = connector(
        "convert", "--input", str(SAMPLE), "--landing-zone", str(tmp_path / "lz"), "--config", str(config)
    )
    assert_one_error(outcome, str(config))


# --- landing zone URL -------------------------------------------------------------------------------


def test_sas_token_in_the_landing_zone_url_is_refused_without_showing_it(tmp_path: Path) -> None:
    url = "https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/LandingZone"
    sas = "?sv=2024-05-04&se=2030-01-01&sp=rwdl&sig=PLANTEDsignature%3D"
    line = assert_one_error(
        connector(*run_args(tmp_path, "--landing-zone", url + sas)), "landing_zone.url", url, "credential"
    )
    assert "PLANTED" not in line and "sig=" not in line


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/container/folder",
        "https://onelake.dfs.fabric.microsoft.com/ws/item/Tables/x",
        "abfss://onelake.dfs.fabric.microsoft.com/item/Files",
    ],
)
def test_malformed_landing_zone_url_is_named(tmp_path: Path, url: str) -> None:
    assert_one_error(connector(*run_args(tmp_path, "--landing-zone", url)), "landing_zone.url", url)


def test_validate_of_a_malformed_url_is_one_line(tmp_path: Path) -> None:
    url = "https://example.com/container/folder"
    assert_one_error(connector("validate", url), url)


MALFORMED_URLS = [
    "abfss://",  # no filesystem, no host
    "abfss://ws@",  # no host
    "https://onelake.dfs.fabric.microsoft.com",  # no workspace
    "https://[::1",  # not a URL at all: urlsplit itself refuses it
    "abfss://ws@[onelake/item/Files",
    "https://onelake.dfs.fabric.microsoft.com:99999/ws/item/Files",
]


def command_args(command: str, url: str, tmp_path: Path) -> list[str]:
    """``command`` with ``url`` as its landing zone."""
    if command == "run":
        return run_args(tmp_path, "--landing-zone", url)
    if command == "convert":
        return ["convert", "--input", str(SAMPLE), "--landing-zone", url, "--checkpoint", str(tmp_path / "ckpt")]
    if command == "replay":
        return ["replay", "--output", str(tmp_path / "out"), url]
    if command == "verify":
        return ["verify", "--source", "postgresql://user@127.0.0.1:1/db", "--landing-zone", url]
    return [command, url]


@pytest.mark.parametrize("url", MALFORMED_URLS)
@pytest.mark.parametrize("command", ["validate", "replay", "verify", "convert", "run"])
def test_a_malformed_landing_zone_url_is_one_line_in_every_command(tmp_path: Path, command: str, url: str) -> None:
    assert_one_error(connector(*command_args(command, url, tmp_path)), url.strip())


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_malformed_url_with_a_query_is_refused_without_showing_the_query(tmp_path: Path, command: str) -> None:
    url = "https://[onelake.dfs.fabric.microsoft.com/ws/item/Files"
    line = assert_one_error(connector(*command_args(command, url + "?sig=PLANTEDsignature", tmp_path)), url)
    assert "PLANTED" not in line and "sig=" not in line


@pytest.mark.parametrize("url", ["abfss://", "https://onelake.dfs.fabric.microsoft.com", "https://[::1"])
def test_a_malformed_dead_letter_url_is_one_line(tmp_path: Path, url: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f'mirror:\n  poison_policy: dead-letter\ndead_letter:\n  url: "{url}"\n')
    outcome = connector(
        "convert", "--config", str(config), "--input", str(SAMPLE), "--landing-zone", str(tmp_path / "lz")
    )
    assert_one_error(outcome, "dead_letter.url", url)


@pytest.mark.parametrize("url", ["abfss://", "https://[::1"])
def test_a_malformed_convert_checkpoint_url_is_one_line(tmp_path: Path, url: str) -> None:
    outcome = connector("convert", "--input", str(SAMPLE), "--landing-zone", str(tmp_path / "lz"), "--checkpoint", url)
    assert_one_error(outcome, url)


def test_empty_landing_zone_is_refused_and_nothing_is_written_to_the_current_directory(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    outcome = connector(*run_args(tmp_path, "--landing-zone", ""), cwd=cwd)
    assert_one_error(outcome, "landing_zone.url is empty")
    assert list(cwd.iterdir()) == []


# --- local folders ---------------------------------------------------------------------------------


def test_checkpoint_that_is_a_file_is_named(tmp_path: Path) -> None:
    target = tmp_path / "ckpt-file"
    target.write_text("not a folder")
    line = assert_one_error(connector(*run_args(tmp_path, "--checkpoint", str(target))), str(target))
    assert line.startswith("error: checkpoint ") and "is a file" in line


def test_landing_zone_that_is_a_file_is_named(tmp_path: Path) -> None:
    target = tmp_path / "lz-file"
    target.write_text("not a folder")
    line = assert_one_error(connector(*run_args(tmp_path, "--landing-zone", str(target))), str(target))
    assert "landing_zone.url" in line and "is a file" in line


def test_checkpoint_that_cannot_be_created_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    target = blocker / "ckpt"
    line = assert_one_error(connector(*run_args(tmp_path, "--checkpoint", str(target))), str(target))
    assert "cannot be created" in line


def test_checkpoint_on_a_read_only_filesystem_is_named(tmp_path: Path, mount_tmpfs: object) -> None:
    read_only = mount_tmpfs(read_only=True)  # type: ignore[operator]
    line = assert_one_error(connector(*run_args(tmp_path, "--checkpoint", str(read_only))), str(read_only))
    assert "not writable" in line and "Read-only file system" in line


def test_full_disk_names_the_file_being_written(tmp_path: Path, mount_tmpfs: object) -> None:
    full = mount_tmpfs(size="8k")  # type: ignore[operator]
    (full / "filler").write_bytes(b"x" * 4096)  # leaves one page: the lock file fits, the data does not
    outcome = connector("convert", "--input", str(SAMPLE), "--landing-zone", str(full / "lz"))
    line = assert_one_error(outcome, str(full / "lz"), "No space left on device")
    assert "cannot write" in line


def test_local_storage_write_errors_carry_the_path(tmp_path: Path, mount_tmpfs: object) -> None:
    full = mount_tmpfs(size="16k")  # type: ignore[operator]
    storage = LocalStorage(full)
    with pytest.raises(StorageError) as info:
        storage.create("dbo.schema/t/00000000000000000001.parquet", b"x" * 65536)
    assert str(full / "dbo.schema/t/00000000000000000001.parquet") in str(info.value)
    assert "No space left on device" in str(info.value)
    storage.create("small", b"x")  # the contract's own errors are untouched
    with pytest.raises(FileExistsError):
        storage.create("small", b"y")


# --- metrics port and Kafka -------------------------------------------------------------------------


def test_metrics_port_in_use_is_named(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - as the metrics server binds
        taken.listen()
        port = taken.getsockname()[1]
        args = run_args(tmp_path)
        args[args.index("--metrics-port") + 1] = str(port)
        line = assert_one_error(connector(*args), f"metrics.port {port}")
    assert "already in use" in line


def test_available_now_against_a_broker_that_is_down_exits_in_bounded_time(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{closed_port()}"
    outcome = connector(
        *run_args(tmp_path, "--bootstrap-servers", bootstrap, "--topics", "dbserver1\\..*"),
        env={"CONNECTOR_SOURCE__CONNECT_TIMEOUT_S": "3"},
    )
    line = assert_one_error(outcome, bootstrap, "source.connect_timeout_s")
    assert "no Kafka broker" in line
    assert not (tmp_path / "ckpt" / "spark").exists()  # refused before Spark started


# --- failures of a running query ------------------------------------------------------------------


def test_spark_data_loss_text_becomes_topic_partition_offset() -> None:
    text = (
        "org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] Query terminated with "
        "exception: Job aborted due to stage failure: ... java.lang.IllegalStateException: Cannot fetch offset "
        "1200 (GroupId: spark-kafka-source-1234-executor, TopicPartition: dbserver1.public.orders-3). "
        "Some data may have been lost because they are not available in Kafka any more; ..."
    )
    error = explain_query_failure(text)
    assert isinstance(error, SourceDataLost)
    assert "dbserver1.public.orders[3]@1200" in str(error)
    assert "snapshot" in str(error) and "\n" not in str(error)


_LOSS = "[KAFKA_DATA_LOSS.{}] Some data may have been lost because they are not available in Kafka any more; ..."


@pytest.mark.parametrize(
    ("reason", "named"),
    [
        (
            "START_OFFSET_RESET] ... Reason: Starting offset for db.public.t-2 was 100 but consumer reset to 150.",
            "db.public.t[2]@100",
        ),
        (
            "PARTITION_OFFSET_CHANGED] ... Reason: Partition db.public.t-0 offset was changed from 9 to 4.",
            "db.public.t[0]@9",
        ),
        (
            "COULD_NOT_READ_OFFSET_RANGE] ... Reason: Could not read records in offset [7, 20) for topic partition "
            "my-topic-with-dashes-11 with consumer group spark-kafka-source-x.",
            "my-topic-with-dashes[11]@7",
        ),
        (
            "INITIAL_OFFSET_NOT_FOUND_FOR_PARTITIONS] ... Cannot find initial offsets for partitions Set(t-0).",
            "(partitions t[0]):",
        ),
        # Spark prints a Scala Set of Kafka TopicPartitions ("<topic>-<partition>"); Debezium's topic names
        # have dots, which the message used to be cut at: "Kafka data lost (HashSet(dbserver1)".
        (
            "INITIAL_OFFSET_NOT_FOUND_FOR_PARTITIONS] ... Reason:\nCannot find initial offsets for partitions "
            "Set(dbserver1.public.orders-0, dbserver1.public.orders-1). They may have been deleted. SQLSTATE: 22000",
            "(partitions dbserver1.public.orders[0], dbserver1.public.orders[1]):",
        ),
        (
            "PARTITIONS_DELETED] ... Reason:\nPartitions HashSet(dbserver1.public.orders-0, "
            "dbserver1.public.customers-0, dbserver1.public.line-items-2, dbserver1.public.products-0, "
            "dbserver1.public.stock-0) have been deleted. "
            "SQLSTATE: 22000",
            "(partitions dbserver1.public.orders[0], dbserver1.public.customers[0], dbserver1.public.line-items[2], "
            "dbserver1.public.products[0], dbserver1.public.stock[0]):",
        ),
        (
            "PARTITIONS_DELETED_AND_GROUP_ID_CONFIG_PRESENT] ... Reason:\nPartitions Set(db.inventory.t-3) have been "
            "deleted.\nKafka option 'kafka.group.id' has been set on this query, it is",
            "(partitions db.inventory.t[3]):",
        ),
        (
            "ADDED_PARTITION_DOES_NOT_START_FROM_OFFSET_ZERO] ... Reason:\nAdded partition db.public.t-4 starts from "
            "7 instead of 0.",
            "db.public.t[4]@7",
        ),
    ],
)
def test_every_kafka_data_loss_condition_names_where(reason: str, named: str) -> None:
    error = explain_query_failure(_LOSS.format(reason.split("]")[0]) + reason.split("]", 1)[1])
    assert isinstance(error, SourceDataLost)
    assert named in str(error), str(error)


def test_connector_error_raised_in_a_batch_is_one_line() -> None:
    text = (
        "py4j.Py4JException: An exception was raised by the Python Proxy. Return Message: Traceback (most "
        'recent call last):\n  File "/x/sink.py", line 10, in publish\n'
        "connector.storage.errors.StorageError: cannot write /lz/t/_tmp_1.part (create): No space left on device\n"
        "\tat py4j.Protocol.getReturnValue(Protocol.java:476)"
    )
    error = explain_query_failure(text)
    assert isinstance(error, BatchFailed)
    assert str(error).startswith("cannot write /lz/t/_tmp_1.part (create): No space left on device")
    assert explain_query_failure("java.lang.OutOfMemoryError: Java heap space") is None


def test_any_query_failure_is_one_line_naming_the_debug_log() -> None:
    """The job raises one error per failed query: the known ones explained, any other by the exception a batch
    raised (the last line of the Python traceback in the JVM text, not the JVM's wrapper), never the whole text."""
    debug_log = Path("/cp/logs/spark.log")
    loss = report_query_failure(
        _LOSS.format("COULD_NOT_READ_OFFSET_RANGE")
        + " Could not read records in offset [7, 20) for topic partition t-1",
        debug_log,
    )
    assert isinstance(loss, SourceDataLost)
    assert str(loss).startswith("Kafka data lost at t[1]@7") and str(loss).endswith(
        "(stack traces in /cp/logs/spark.log)"
    )
    text = (
        "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch sink. "
        "Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
        '  File "/x/job.py", line 3, in write\n    raise ValueError("a bug")\n'
        "ValueError: a bug\n\n\tat py4j.Protocol.getReturnValue(Protocol.java:476)\n"
        "py4j.protocol.Py4JJavaError: An error occurred while calling o105.getResult."
    )
    failed = report_query_failure(text, debug_log)
    assert isinstance(failed, QueryFailed)
    assert str(failed) == "streaming query failed: ValueError: a bug (stack traces in /cp/logs/spark.log)"
    jvm_only = report_query_failure("java.lang.OutOfMemoryError: Java heap space\n\tat a.b(C.java:1)", None)
    assert str(jvm_only) == "streaming query failed: java.lang.OutOfMemoryError: Java heap space"


def test_the_packaged_sample_is_refused_for_a_onelake_landing_zone(tmp_path: Path) -> None:
    """No source configured and a OneLake URL: before, the run published the sample events into OneLake."""
    url = "https://onelake.dfs.fabric.microsoft.com/Sales/Inventory.MountedRelationalDatabase/Files/LandingZone"
    line = assert_one_error(connector(*run_args(tmp_path, "--landing-zone", url)), "packaged sample", url)
    assert "source.bootstrap_servers" in line
