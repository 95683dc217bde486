"""Benchmarks of the connector, run from a source checkout (``python -m benchmarks.bench``).

Not part of the wheel: ``pyproject.toml`` packages ``connector`` only.
"""
