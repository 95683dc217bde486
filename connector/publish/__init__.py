"""Driver side: plan (ledger), number, rename and commit a batch's files; the tables' lifecycle and their rebuilds.

The batch's files are staged by ``connector.collect``; the fence keeps one writer.
"""
