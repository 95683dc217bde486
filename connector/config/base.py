"""The base of every settings section: frozen, and unknown keys are errors."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict

_Model = TypeVar("_Model", bound=BaseModel)


class FrozenModel(BaseModel):
    """A settings section: frozen once loaded, and a key it does not know is an error, not ignored.

    A value derived from the fields (a ``StorageLocation``) is a ``functools.cached_property``: built once, on
    first use, and carried with the settings (pickled too); ``model_copy`` forgets it (``without_derived``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy, ``update`` applied, whose derived values are built again from its own fields."""
        return without_derived(super().model_copy(update=update, deep=deep))


def without_derived(model: _Model) -> _Model:
    """``model`` with its cached derived values dropped: ``model_copy`` copies them, stale after an ``update``."""
    for klass in type(model).__mro__:
        for name, member in vars(klass).items():
            if isinstance(member, cached_property):
                model.__dict__.pop(name, None)
    return model
