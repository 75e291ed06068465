"""Resource pools: which pool a ResourceSlice belongs to, and the rule that only the
newest generation of a pool counts (upstream: slices of an older generation are being
replaced and are ignored), written once for every reader of slices.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

__all__ = ["PoolKey", "at_newest", "newest_generations", "pool_of"]

#: (driver, pool name): a pool is named within its driver.
PoolKey = tuple[str, str]
T = TypeVar("T")


def pool_of(spec: Mapping[str, Any]) -> tuple[PoolKey, int]:
    """A slice's pool and that slice's generation of it, from the slice's spec (JSON)."""
    pool = spec.get("pool") or {}
    return (str(spec.get("driver", "")), str(pool.get("name", ""))), int(pool.get("generation") or 0)


def newest_generations(pools: Iterable[tuple[PoolKey, int]]) -> dict[PoolKey, int]:
    """The newest generation seen of each pool."""
    newest: dict[PoolKey, int] = {}
    for key, generation in pools:
        if generation > newest.get(key, generation - 1):
            newest[key] = generation
    return newest


def at_newest(items: Iterable[T], pool: Callable[[T], tuple[PoolKey, int]]) -> list[T]:
    """The items (slices, in whatever form) at the newest generation of their pool, in order."""
    listed = list(items)
    pools = [pool(item) for item in listed]
    newest = newest_generations(pools)
    return [item for item, (key, generation) in zip(listed, pools, strict=True) if newest[key] == generation]
