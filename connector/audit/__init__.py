"""The continuous audit: each table compared with Fabric's, the loop inside ``run``, the re-read signal."""
