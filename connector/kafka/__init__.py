"""Kafka: the connector's own source, its offsets in Spark's checkpoint, batch ranges, Entra ID for clients."""
