"""The Fabric landing-zone contract, in one place: where things live and what the files say.

Table folders (and finding them), the 20-digit file names and the reserved names; ``_metadata.json``
(key names and their spellings, documented defaults, the delimited-text properties and data types) and
``_partnerEvents.json``. The writer (``publish``) builds and compares its files with these functions, and
the reader, the validator and the read-back tools (``readback``) read and check them with the same ones, so the
two sides cannot drift apart. Three ways to read ``_metadata.json``, each for its reader:

* ``effective_metadata``: what the mirroring service understands (case-folded names, absent keys as their
  defaults); the writer compares an existing file with its own through it;
* ``parse_table_metadata`` / ``table_format``: lenient (a malformed key means its default), for replaying
  whatever the service could read;
* ``readback.metadata_checks``: strict, one message per broken rule, for ``validate``.
"""
