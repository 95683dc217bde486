"""Kafka: the clients' options and authentication (librdkafka's dialect, Microsoft Entra ID)."""
