"""``python -m connector``."""

from connector.commands.cli import main

raise SystemExit(main())
