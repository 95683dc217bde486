"""Debezium change events from Kafka → a Microsoft Fabric open-mirroring landing zone."""

__version__ = "0.1.0"
