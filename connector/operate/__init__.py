"""Beside the flow: rebuilds, dead letters, source-settings checks, Fabric status, health and metrics."""
