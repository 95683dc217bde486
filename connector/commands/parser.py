"""The command line's argument parser: every command and its flags (``python -m connector --help``)."""

from __future__ import annotations

import argparse

from connector.commands.flags import FLAGS, add_flags

# ``--help`` prints this as is: plain text, no reST markup.
DESCRIPTION = """Command line: python -m connector <command>.

Every flag of run shows the environment variable that sets it too; flags win over the
environment, which wins over the YAML file.
"""


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
    """The argument parser (also used to render ``--help`` in the README); its description is ``DESCRIPTION``."""
    parser = argparse.ArgumentParser(prog="python -m connector", description=DESCRIPTION)
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
