"""Executor side: Debezium records of one slice → decoded, marked, ordered, typed pieces per table."""
