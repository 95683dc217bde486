"""``python -m connector``."""

from connector.cli import main

raise SystemExit(main())
