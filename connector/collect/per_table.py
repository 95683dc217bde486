"""Running one step for many tables at once: tables are independent, the steps of one table stay in order.

A batch in which a thousand tables change makes a thousand small plans and renames; one after another they
cost a round trip each (on OneLake, several). Threads overlap those waits; ``mirror.publish_parallelism``
bounds them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

Key = TypeVar("Key")
Outcome = TypeVar("Outcome")


def for_each_table(work: Callable[[Key], Outcome], keys: Sequence[Key], workers: int) -> list[Outcome]:
    """``work`` of every key, at most ``workers`` at a time; outcomes in the order of ``keys``.

    The first exception ``work`` raises is raised here, once every started call has ended.
    """
    if workers <= 1 or len(keys) <= 1:
        return [work(key) for key in keys]
    with ThreadPoolExecutor(max_workers=min(workers, len(keys)), thread_name_prefix="publish") as pool:
        return list(pool.map(work, keys))
