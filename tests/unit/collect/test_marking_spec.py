"""The one op → row-marker mapping: the vectorised form the lane uses equals the per-event form."""

from __future__ import annotations

import numpy as np
import pytest

from connector.collect.marking import MarkerSpec
from connector.events import Op, RowMarker


@pytest.mark.parametrize("replay_safe", [False, True])
def test_vectorised_markers_equal_the_per_op_mapping(replay_safe: bool) -> None:
    spec = MarkerSpec(replay_safe)
    ops = np.array(["c", "r", "u", "u", "d", "c"], dtype=object)
    key_changed = np.array([False, False, False, True, False, False])
    expected = [
        spec.by_op[Op(op)] if not changed else spec.key_change[1] for op, changed in zip(ops, key_changed, strict=True)
    ]
    assert spec.of_ops(ops, key_changed).tolist() == [int(m) for m in expected]
    insert = RowMarker.UPSERT if replay_safe else RowMarker.INSERT
    assert spec.of_ops(ops, key_changed).tolist() == [insert, insert, 1, insert, 2, insert]
    assert spec.key_change == (RowMarker.DELETE, insert)
