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
from typing import TYPE_CHECKING

from connector import early_stop
from connector.commands.flags import FLAGS, add_flags, given, settings_overrides
from connector.errors import ConnectorError

if TYPE_CHECKING:
    from connector.readback.mirrored_tables import MirroredTables
    from connector.storage.location import StorageLocation


def _add_mirror_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config file (schemas/connector-config.schema.json)")
    add_flags(parser, "--decimal-columns", "--replay-safe-inserts", "--initial-load")


_LANDING_ZONE_HELP = (
    f"folder or OneLake URL (default: the config's landing_zone.url, env {FLAGS['--landing-zone'].env})"
)
_CHECKPOINT_HELP = (
    f"the connector's checkpoint folder (default: the config's checkpoint, env {FLAGS['--checkpoint'].env})"
)


def _add_landing_zone_flags(parser: argparse.ArgumentParser) -> None:
    """``--config`` and ``--credential`` of the tools that read a landing zone, as ``run`` reads its own."""
    parser.add_argument(
        "--config", help="the connector's YAML config: its landing zone and identity when not given here"
    )
    add_flags(parser, "--credential")


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
    arc = sub.add_parser(
        "class-archive",
        help="write the Java class-data archive the Spark driver maps at start (spark.class_archive) from one run "
        "of the packaged sample; the image writes one at build",
    )
    arc.add_argument("path", help="the archive file to write (replaced only once the new one is complete)")
    return parser


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="the streaming service (Spark Structured Streaming)")
    _add_mirror_flags(run)
    add_flags(
        run,
        "--bootstrap-servers",
        "--topics",
        "--source-path",
        "--landing-zone",
        "--checkpoint",
        "--trigger",
        "--max-offsets-per-trigger",
        "--starting-offsets",
        "--metrics-port",
        "--spark-master",
    )
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
    add_flags(ini, "--workspace-id", "--name", "--item-id", "--api-url", "--onelake-url", "--credential")
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
    add_flags(ini, "--max-wait", "--write-config")


def _add_convert(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conv = sub.add_parser("convert", help="kcat -J dumps → landing zone (offline twin of run)")
    _add_mirror_flags(conv)
    conv.add_argument("--input", action="append", required=True, help="kcat -J file or folder; repeatable")
    # Required, and a ledger folder of convert's own: the environment stands in for neither.
    FLAGS["--landing-zone"].add_to(conv, help="folder or OneLake URL", required=True)
    FLAGS["--checkpoint"].add_to(conv, help="ledger folder; re-running with it publishes nothing twice")
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
    FLAGS["--landing-zone"].add_to(ver, help=_LANDING_ZONE_HELP)
    ver.add_argument(
        "--tables",
        help="comma-separated schema.table list, judged alone; default: every table of the mirrored schemas "
        "(a source table there without a table folder is a difference)",
    )
    ver.add_argument(
        "--ignore-tables",
        help="comma-separated schema.table list never judged: tables deliberately not mirrored",
    )
    ver.add_argument(
        "--tables-path",
        help="Fabric's mirrored Delta tables (<workspace>/<item>/Tables in OneLake, or a local folder) to compare "
        "with the source; default: those of the configured landing zone when it is a mirrored database's, "
        "else (and whenever --landing-zone is given) the landing zone replayed",
    )
    ver.add_argument(
        "--settle-s",
        type=float,
        default=120.0,
        help="against the mirrored tables: how long a difference may wait for the mirror to pass the source's "
        "position at the first look (Debezium has it, Fabric applied what was published) before it counts anyway",
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
    FLAGS["--checkpoint"].add_to(tab, help=_CHECKPOINT_HELP)
    tab.add_argument("--config", help="YAML config (checkpoint, fabric_status)")
    tab.add_argument("--json", action="store_true", help="one JSON object per line")

    reb = sub.add_parser(
        "rebuild",
        help="rebuild a table: the running connector deletes its folder, waits until Fabric dropped it, and has "
        "Debezium re-snapshot it (incremental snapshot)",
    )
    reb.add_argument("table", help="schema.table, as `tables` names it")
    FLAGS["--checkpoint"].add_to(reb, help=_CHECKPOINT_HELP)
    reb.add_argument("--config", help="YAML config (checkpoint)")
    reb.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS", help="wait until the snapshot is requested (else exit 1)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = build_parser().parse_args(argv)
    if args.command != "run":
        # Only the service stops gracefully; the tools die of a stop signal as before (one that came is delivered).
        early_stop.release()
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

        location = _landing_zone(args)
        mirrored = _mirrored_tables(args, location)
        return verify_command(
            args.source,
            location,
            args.tables,
            ignore_tables=args.ignore_tables,
            mirrored=mirrored,
            settle_s=args.settle_s,
        )
    if command in ("tables", "rebuild"):
        return _tables(args)
    if command == "class-archive":
        from pathlib import Path

        from connector.spark.class_archive import write_class_archive

        write_class_archive(Path(args.path))
        print(f"class archive written: {args.path}")
        return 0
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

    options = {
        "name": given(args, "--name"),
        "onelake_url": given(args, "--onelake-url"),
        "default_schema": args.default_schema,
        "target_properties": parse_target_properties(args.target_property),
        "start": args.start,
        "delta_change_data_feed": args.delta_change_data_feed,
        "config": args.config,
        "max_wait_s": float(given(args, "--max-wait") or 600),
        "write_config": given(args, "--write-config"),
    }
    return init_command(load_settings(args.config, **settings_overrides(args)), options)


def _check_config(args: argparse.Namespace) -> int:
    from connector.commands.check_config import check_config_file

    problems = check_config_file(args.file)
    code = _report_problems(problems, args.file)
    if args.online and not problems:
        return _check_online(args.file)
    return code


def _report_problems(problems: Sequence[object], subject: str) -> int:
    """Print each problem, or that ``subject`` is valid; the exit code (1: there were problems)."""
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{subject}: valid")
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

    settings = load_settings(args.config, **settings_overrides(args))
    checkpoint = settings.checkpoint_location.open()
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
    return _report_problems(validate_landing_zone(storage), location.url)


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


def _mirrored_tables(args: argparse.Namespace, location: StorageLocation) -> MirroredTables | None:
    """``verify``'s mirror: Fabric's Delta tables (``--tables-path``, else the configured mirrored database's).

    ``--landing-zone`` without ``--tables-path`` keeps the replay of the landing zone, as does a configured landing
    zone that is no mirrored database's (a local folder).
    """
    from connector.errors import ConfigError
    from connector.readback.mirrored_tables import MirroredTables, tables_url

    if args.tables_path:
        return MirroredTables(args.tables_path, location.identity)
    if args.landing_zone:
        return None
    try:
        return MirroredTables(tables_url(location.url), location.identity)
    except ConfigError:
        return None


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
