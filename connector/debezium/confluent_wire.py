"""The Confluent wire format's header: what the Avro decoder strips and what the JSON decoder recognises.

A value serialised against a schema registry starts with a magic byte 0 and the schema's id as four big-endian
bytes; the Avro body follows.
"""

MAGIC_BYTE = 0
HEADER_SIZE = 5
