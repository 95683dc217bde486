"""Command line: python -m connector <command> runs the command ``parser.build_parser`` reads.

Flags win over the environment, which wins over the YAML file.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from connector import early_stop
from connector.commands.flags import given, settings_overrides
from connector.commands.parser import build_parser
from connector.errors import ConnectorError

if TYPE_CHECKING:
    from connector.readback.mirrored_tables import MirroredTables
    from connector.storage.location import StorageLocation


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
        return MirroredTables(tables_url(location), location.identity)
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
