"""Executor side: Debezium records of one slice → decoded, marked, ordered, typed pieces per table → staged files.

Everything here runs where a slice is collected: in a Spark task on an executor, or on the driver for the records
it collects itself (``convert``, ``spark.decode_on: driver``, ``keep-last`` tables, whose TOAST store
(``toast_store``) is the driver's state). ``staging`` encodes (``encoding``) and writes the pieces under staged
names; only their metadata goes back to the driver, which numbers and publishes them (``connector.publish``).
"""
