"""Spark and its workers: the session, its sources and JVM options, the executors' daemon, worker and slices."""
