"""Beside the flow: source-settings checks, Fabric status, health and metrics, the status page and ``tables``."""
