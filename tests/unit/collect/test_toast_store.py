"""The keep-last store on its own: batch overlay, removed keys, snapshots."""

from __future__ import annotations

import orjson

from connector.collect.toast_store import ToastStore


def test_removed_keys_stay_readable_until_evicted_oldest_first() -> None:
    store = ToastStore({(1,): {"name": "a"}, (2,): {"name": "b"}, (3,): {"name": "c"}}, removed_limit=2)
    for key in [(1,), (2,), (3,)]:
        store.remove(key)
    assert store.get((3,)) == {"name": "c"}  # still in the batch overlay
    store.commit()
    assert store.entries == {}
    assert store.get((1,)) is None
    assert [store.get((2,)), store.get((3,))] == [{"name": "b"}, {"name": "c"}]


def test_a_live_key_wins_over_its_removed_values() -> None:
    store = ToastStore({(1,): {"name": "old"}}, removed_limit=10)
    store.remove((1,))
    store.put((1,), {"name": "new"})
    assert store.get((1,)) == {"name": "new"}
    store.commit()
    assert store.get((1,)) == {"name": "new"}
    assert store.removed == {(1,): {"name": "old"}}


def test_rollback_forgets_the_batch_removals() -> None:
    store = ToastStore({(1,): {"name": "a"}}, removed_limit=10)
    store.remove((1,))
    store.rollback()
    assert store.get((1,)) == {"name": "a"}
    assert store.removed == {}


def test_snapshot_round_trips_live_and_removed_keys_with_the_batch_applied() -> None:
    store = ToastStore({(1, "x"): {"name": "a"}, (2, "y"): {"name": "b"}}, removed_limit=10)
    store.remove((1, "x"))
    loaded = ToastStore.from_snapshot(store.snapshot(), removed_limit=10)
    assert loaded.entries == {(2, "y"): {"name": "b"}}
    assert loaded.removed == {(1, "x"): {"name": "a"}}
    assert store.entries == {(1, "x"): {"name": "a"}, (2, "y"): {"name": "b"}}  # snapshot does not commit


def test_snapshots_of_earlier_versions_load_as_live_keys() -> None:
    """Checkpoints written before removed keys were kept hold a plain list of [key, values]."""
    loaded = ToastStore.from_snapshot(orjson.dumps([[[7], {"name": "a"}]]), removed_limit=10)
    assert loaded.entries == {(7,): {"name": "a"}}
    assert loaded.removed == {}


def test_an_empty_overlay_entry_hides_older_removed_values() -> None:
    """A key whose last values are empty ({}: nothing TOAST-able written) is known: its older values are stale."""
    store = ToastStore({}, {(1,): {"doc": "stale"}}, removed_limit=10)
    store.put((1,), {})
    assert store.get((1,)) == {}
    store.remove((1,))
    in_batch = store.get((1,))
    store.commit()
    assert store.get((1,)) == {}
    assert in_batch == {}  # the batch sees what its commit keeps, not the removed values it replaced
