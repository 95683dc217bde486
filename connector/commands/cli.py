"""Command line: python -m connector <command>.

Every flag of run shows the environment variable that sets it too; flags win over the
environment, which wins over the YAML file.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, get_args

from connector.commands.flags import settings_overrides
from connector.errors import ConnectorError
from connector.storage import CredentialKind

if TYPE_CHECKING:
    from connector.storage.location import StorageLocation


def _env_help(text: str, env: str) -> str:
    return f"{text} (env: {env})"


def _add_mirror_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config file (schemas/connector-config.schema.json)")
    parser.add_argument(
        "--decimal-columns",
        action="append",
        metavar="SCHEMA.TABLE.COLUMN=P,S",
        help="write a column as decimal(P,S), P <= 38 (a decimal sent as a string, a numeric without precision, "
        "a decimal over 38 digits); repeatable "
        "(env: CONNECTOR_MIRROR__DECIMAL_COLUMNS as JSON)",
    )
    parser.add_argument(
        "--replay-safe-inserts",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=_env_help(
            "write creates/snapshot reads as upserts (4), the default; --no-replay-safe-inserts writes inserts (0)",
            "CONNECTOR_MIRROR__REPLAY_SAFE_INSERTS",
        ),
    )
    parser.add_argument(
        "--initial-load",
        choices=("marker-free", "upsert"),
        default=None,
        help=_env_help(
            "a table's initial-snapshot files: without __rowMarker__ (marker-free, the default: Fabric's fast "
            "path) or with it as upserts (upsert)",
            "CONNECTOR_MIRROR__INITIAL_LOAD",
        ),
    )


_LANDING_ZONE_HELP = "folder or OneLake URL (default: the config's landing_zone.url, env CONNECTOR_LANDING_ZONE__URL)"


def _add_landing_zone_flags(parser: argparse.ArgumentParser) -> None:
    """``--config`` and ``--credential`` of the tools that read a landing zone, as ``run`` reads its own."""
    parser.add_argument(
        "--config", help="the connector's YAML config: its landing zone and identity when not given here"
    )
    parser.add_argument(
        "--credential",
        choices=get_args(CredentialKind),
        help=_env_help(
            "Azure identity for a OneLake landing zone (default: the config's)", "CONNECTOR_LANDING_ZONE__CREDENTIAL"
        ),
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to render ``--help`` in the README).

    Its description is this module's docstring, printed as is by ``--help``: plain text, no reST markup.
    """
    parser = argparse.ArgumentParser(prog="python -m connector", description=__doc__)
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_init(sub)
    _add_convert(sub)
    _add_landing_zone_readers(sub)
    _add_checks(sub)
    _add_table_commands(sub)
    return parser


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="the streaming service (Spark Structured Streaming)")
    _add_mirror_flags(run)
    run.add_argument(
        "--bootstrap-servers", help=_env_help("Kafka bootstrap servers", "CONNECTOR_SOURCE__BOOTSTRAP_SERVERS")
    )
    run.add_argument("--topics", help=_env_help("topic regex (subscribePattern)", "CONNECTOR_SOURCE__TOPICS"))
    run.add_argument(
        "--source-path",
        help=_env_help("folder of kcat -J dumps: the embedded default source, no Kafka", "CONNECTOR_SOURCE__PATH"),
    )
    run.add_argument("--landing-zone", help=_env_help("folder or OneLake URL", "CONNECTOR_LANDING_ZONE__URL"))
    run.add_argument("--checkpoint", help=_env_help("checkpoint + ledger folder", "CONNECTOR_CHECKPOINT"))
    run.add_argument("--trigger", help=_env_help("'available-now' or an interval like 10s", "CONNECTOR_TRIGGER"))
    run.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        help=_env_help("records per micro-batch at most", "CONNECTOR_SOURCE__MAX_OFFSETS_PER_TRIGGER"),
    )
    run.add_argument(
        "--starting-offsets", help=_env_help("earliest (default) or latest", "CONNECTOR_SOURCE__STARTING_OFFSETS")
    )
    run.add_argument("--metrics-port", type=int, help=_env_help("Prometheus port, 0 = off", "CONNECTOR_METRICS__PORT"))
    run.add_argument("--spark-master", help=_env_help("Spark master", "CONNECTOR_SPARK__MASTER"))
    run.add_argument(
        "--resume-from-ledger",
        action="store_true",
        help="recovery when Spark's checkpoint is lost or does not match the ledger: move it aside and start "
        "a new one from the Kafka offsets the ledger's last batch ended at (an exact mirror, see README)",
    )


def _add_init(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``init``: the open-mirrored database created (if missing) and started, the chain checked."""
    ini = sub.add_parser(
        "init",
        help="create the open-mirrored database if missing, start it, prove the landing zone, print the settings",
    )
    ini.add_argument("--config", help="YAML config: fabric_status (API URL, identity), landing_zone.credential, source")
    ini.add_argument(
        "--workspace-id", help=_env_help("the Fabric workspace (GUID)", "CONNECTOR_FABRIC_STATUS__WORKSPACE_ID")
    )
    ini.add_argument("--name", help=_env_help("display name: found, or created", "CONNECTOR_INIT_NAME"))
    ini.add_argument(
        "--item-id",
        help=_env_help("an existing mirrored database's id", "CONNECTOR_FABRIC_STATUS__MIRRORED_DATABASE_ID"),
    )
    ini.add_argument("--api-url", help=_env_help("Fabric REST API base URL", "CONNECTOR_FABRIC_STATUS__API_URL"))
    ini.add_argument(
        "--onelake-url",
        help=_env_help(
            "OneLake DFS endpoint (default https://onelake.dfs.fabric.microsoft.com)", "CONNECTOR_INIT_ONELAKE_URL"
        ),
    )
    ini.add_argument(
        "--credential",
        choices=get_args(CredentialKind),
        help=_env_help("Azure identity for the landing zone", "CONNECTOR_LANDING_ZONE__CREDENTIAL"),
    )
    ini.add_argument("--default-schema", help="defaultSchema of a created database (default dbo)")
    ini.add_argument(
        "--target-property",
        action="append",
        metavar="KEY=VALUE",
        help="extra target.typeProperties of mirroring.json for a created database (JSON values read as JSON), "
        "e.g. the Delta change data feed setting; repeatable",
    )
    ini.add_argument(
        "--start",
        action="store_true",
        help="start a database found Stopped or Paused (otherwise that is an error: someone stopped it)",
    )
    ini.add_argument(
        "--delta-change-data-feed",
        action="store_true",
        help="set enableDeltaChangeDataFeed in the definition (a created database, or an existing one)",
    )
    ini.add_argument(
        "--max-wait",
        type=float,
        metavar="SECONDS",
        help=_env_help("bound of all waits for Fabric (default 600)", "CONNECTOR_INIT_MAX_WAIT_S"),
    )
    ini.add_argument(
        "--write-config",
        metavar="FILE",
        help=_env_help("write landing_zone.url and fabric_status into this YAML", "CONNECTOR_INIT_WRITE_CONFIG"),
    )


def _add_convert(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conv = sub.add_parser("convert", help="kcat -J dumps → landing zone (offline twin of run)")
    _add_mirror_flags(conv)
    conv.add_argument("--input", action="append", required=True, help="kcat -J file or folder; repeatable")
    conv.add_argument("--landing-zone", required=True)
    conv.add_argument("--checkpoint", help="ledger folder; re-running with it publishes nothing twice")
    conv.add_argument("--batch-size", type=int, default=100_000)


def _add_landing_zone_readers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``validate``, ``replay`` and ``verify``: they read a landing zone as ``run`` writes it."""
    val = sub.add_parser("validate", help="check a landing zone against the open-mirroring rules")
    val.add_argument("landing_zone", nargs="?", help=_LANDING_ZONE_HELP)
    _add_landing_zone_flags(val)

    rep = sub.add_parser("replay", help="apply a landing zone as open mirroring would; write each table's state")
    rep.add_argument("landing_zone", nargs="?", help=_LANDING_ZONE_HELP)
    rep.add_argument("--output", required=True)
    _add_landing_zone_flags(rep)
    rep.add_argument("--show", type=int, default=0, metavar="N", help="also print the first N rows of each table")
    rep.add_argument(
        "--format",
        choices=["parquet", "delta"],
        default="parquet",
        help="parquet: one file per table (fast pyarrow replay, reads anything); delta: real Delta tables, "
        "as Fabric writes them, refusing what Delta cannot hold",
    )

    ver = sub.add_parser("verify", help="compare the replayed landing zone with the source database")
    ver.add_argument(
        "--source", required=True, help="postgresql://, mysql:// or mariadb://USER[:PASSWORD]@HOST:PORT/DB"
    )
    ver.add_argument("--landing-zone", help=_LANDING_ZONE_HELP)
    ver.add_argument(
        "--tables",
        help="comma-separated schema.table list, judged alone; default: every table of the mirrored schemas "
        "(a source table there without a table folder is a difference)",
    )
    ver.add_argument(
        "--ignore-tables",
        help="comma-separated schema.table list never judged: tables deliberately not mirrored",
    )
    _add_landing_zone_flags(ver)


def _add_checks(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chk = sub.add_parser("check-config", help="validate a YAML config against schemas/connector-config.schema.json")
    chk.add_argument("file")
    chk.add_argument(
        "--online",
        action="store_true",
        help="also check the whole chain: Fabric API token and database running, OneLake token and a scratch "
        "write, Kafka and its topics, Debezium's settings (one line per failed step)",
    )

    src = sub.add_parser(
        "check-source", help="warn about lossy Debezium connector settings, read from the Kafka Connect REST API"
    )
    src.add_argument("--connect", required=True, help="Kafka Connect REST URL, e.g. http://127.0.0.1:8083")
    src.add_argument("--connector", help="one connector's name; default: every registered connector")
    src.add_argument(
        "--config", help="the mirror's YAML config: its mirror.truncate_policy decides whether skipped TRUNCATEs matter"
    )


def _add_table_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``tables`` and ``rebuild``: they talk to a running connector through its checkpoint."""
    tab = sub.add_parser("tables", help="one line per mirrored table: state, files, rows, last batch, Fabric's state")
    tab.add_argument("--checkpoint", help="the connector's checkpoint folder (default: the config's checkpoint)")
    tab.add_argument("--config", help="YAML config (checkpoint, fabric_status)")
    tab.add_argument("--json", action="store_true", help="one JSON object per line")

    reb = sub.add_parser(
        "rebuild",
        help="rebuild a table: the running connector deletes its folder, waits until Fabric dropped it, and has "
        "Debezium re-snapshot it (incremental snapshot)",
    )
    reb.add_argument("table", help="schema.table, as `tables` names it")
    reb.add_argument("--checkpoint", help="the connector's checkpoint folder (default: the config's checkpoint)")
    reb.add_argument("--config", help="YAML config (checkpoint)")
    reb.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS", help="wait until the snapshot is requested (else exit 1)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    if args.log_level.upper() != "DEBUG":
        # The Azure SDK logs every HTTP request with its headers at INFO: noise in a service log.
        logging.getLogger("azure").setLevel(logging.WARNING)
    # py4j logs every JVM call with its arguments at DEBUG (resolved Kafka secrets among them) and each
    # callback at INFO: never useful in a service log, at any level.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("py4j.clientserver").addFilter(_drop_callback_failures)
    try:
        return int(_dispatch(args))
    except ConnectorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our output went away (``replay --show 5 | head``): nothing left to say, no traceback.
        # Python would report the pipe again when it flushes stdout at exit, so stdout goes to /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _drop_callback_failures(record: logging.LogRecord) -> bool:
    """Drop py4j's traceback of an exception raised in ``foreachBatch``.

    The query fails with that exception, and ``run`` reports it once: as one ``error:`` line when its cause
    is known, else in full. py4j's copy would only bury that line under a second traceback.
    """
    return not str(record.msg).startswith("There was an exception while executing the Python Proxy")


def _dispatch(args: argparse.Namespace) -> int:
    command = args.command
    if command == "convert":
        return _convert(args)
    if command == "validate":
        return _validate(args)
    if command == "replay":
        return _replay(args)
    if command in ("check-config", "init"):
        return _check_config(args) if command == "check-config" else _init(args)
    if command == "run":
        from connector.config import load_settings
        from connector.stream.job import run

        settings = load_settings(args.config, **settings_overrides(args))
        return int(run(settings, resume_from_ledger_offsets=args.resume_from_ledger))
    if command == "check-source":
        from connector.config import load_settings
        from connector.operate.debezium_config_lint import check_source_command

        mirror = load_settings(args.config).mirror
        return check_source_command(
            args.connect, args.connector, mirror.truncate_policy, rebuilds=mirror.asks_for_snapshots
        )
    if command == "verify":
        from connector.readback.verify import verify_command

        return verify_command(args.source, _landing_zone(args), args.tables, ignore_tables=args.ignore_tables)
    if command in ("tables", "rebuild"):
        return _tables(args)
    msg = f"unknown command {command}"
    raise AssertionError(msg)


def _convert(args: argparse.Namespace) -> int:
    from connector.commands.convert import convert
    from connector.config import load_settings

    # The checkpoint flag, when given, is the settings' too: the default dead-letter folder sits beside the ledger.
    settings = load_settings(args.config, **settings_overrides(args))
    summary = convert(args.input, settings, checkpoint=args.checkpoint, batch_size=args.batch_size)
    print(
        f"records={summary.records} rows={summary.rows} files={summary.files} dead_letters={summary.dead_letters} "
        f"skipped={sum(summary.skipped.values())} "
        + " ".join(f"skipped_{k}={v}" for k, v in sorted(summary.skipped.items()))
    )
    for line in summary.bad_lines:
        print(f"bad input: {line}", file=sys.stderr)
    for table, reason in sorted(summary.stopped.items()):
        print(f"table stopped: {table}: {reason}", file=sys.stderr)
    return 0 if summary.ok else 1


def _init(args: argparse.Namespace) -> int:
    from connector.commands.init import init_command, parse_target_properties
    from connector.config import load_settings

    env = os.environ.get
    options = {
        "name": args.name or env("CONNECTOR_INIT_NAME"),
        "onelake_url": args.onelake_url or env("CONNECTOR_INIT_ONELAKE_URL"),
        "default_schema": args.default_schema,
        "target_properties": parse_target_properties(args.target_property),
        "start": args.start,
        "delta_change_data_feed": args.delta_change_data_feed,
        "config": args.config,
        "max_wait_s": args.max_wait or float(env("CONNECTOR_INIT_MAX_WAIT_S") or 600),
        "write_config": args.write_config or env("CONNECTOR_INIT_WRITE_CONFIG"),
    }
    return init_command(load_settings(args.config, **settings_overrides(args)), options)


def _check_config(args: argparse.Namespace) -> int:
    from connector.commands.check_config import check_config_file

    problems = check_config_file(args.file)
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{args.file}: valid")
    if args.online and not problems:
        return _check_online(args.file)
    return 1 if problems else 0


def _check_online(file: str) -> int:
    from connector.commands.init import check_online
    from connector.config import load_settings

    failures = check_online(load_settings(file))
    for failure in failures:
        print(f"error: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _tables(args: argparse.Namespace) -> int:
    from connector.commands.tables import rebuild_command, tables_command
    from connector.config import load_settings
    from connector.storage.location import StorageLocation

    settings = load_settings(args.config, **settings_overrides(args))
    checkpoint = StorageLocation(settings.checkpoint, setting="checkpoint").open()
    if args.command == "rebuild":
        return rebuild_command(checkpoint, args.table, wait_s=args.wait)
    from connector.fabric.status import open_fabric_status

    reader = open_fabric_status(settings)
    database = reader.database() if reader is not None else None
    if database is not None and not args.json:
        print(f"mirrored database: {database.describe()}")  # first: a stopped database explains every table
    return tables_command(checkpoint, as_json=args.json, fabric=reader.tables() if reader is not None else None)


def _validate(args: argparse.Namespace) -> int:
    from connector.readback.landing_reader import require_landing_zone
    from connector.readback.validate import validate_landing_zone

    location = _landing_zone(args)
    storage = location.open()
    require_landing_zone(storage, location.url)
    problems = validate_landing_zone(storage)
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{location.url}: valid")
    return 1 if problems else 0


def _replay(args: argparse.Namespace) -> int:
    from connector.readback.replay import replay_to

    states = replay_to(_landing_zone(args), args.output, args.format)
    for table, data in sorted(states.items()):
        print(f"{table}: {data.num_rows} rows")
    if args.show:
        for table, data in sorted(states.items()):
            print(f"\n== {table} ==")
            print(data.slice(0, args.show).to_pandas().to_string(index=False))
    return 0


def _landing_zone(args: argparse.Namespace) -> StorageLocation:
    """The landing zone a reading tool opens, and its identity: the flags', else the config's (file, environment).

    An empty, SAS-carrying or malformed URL is refused here, as one ``error:`` line.
    """
    from connector.config import load_settings
    from connector.storage.identity import CredentialConfig
    from connector.storage.location import StorageLocation

    if args.landing_zone and args.credential:
        return StorageLocation(args.landing_zone, CredentialConfig(kind=args.credential))
    configured = load_settings(args.config).landing_zone
    identity = CredentialConfig(kind=args.credential) if args.credential else configured.identity
    return StorageLocation(args.landing_zone or configured.url, identity)
