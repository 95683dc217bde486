"""Debezium's control channel: snapshot signals, their notifications, the connectors' settings and status."""
