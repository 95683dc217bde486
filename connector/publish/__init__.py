"""Driver side: plan (ledger), number, rename and commit a batch's files staged by ``connector.collect``; the fence."""
