"""The command line: one module per command that is more than a call into the service."""
