"""``python -m connector`` and the ``debezium-fabric-mirror`` script."""

from connector import early_stop


def main() -> int:
    """Take the stop signals first (``connector.early_stop``), then import and run the command line."""
    early_stop.install()
    from connector.commands.cli import main as command_line

    return command_line()


if __name__ == "__main__":
    raise SystemExit(main())
