"""Healing: records Kafka no longer holds, topic resets, a resume from the ledger, a failed query's cause."""
