"""Driver side: stage, number (ledger), rename and commit a batch's files; the writer fence."""
