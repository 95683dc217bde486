"""The base of every settings section: frozen, and unknown keys are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenModel(BaseModel):
    """A settings section: frozen once loaded, and a key it does not know is an error, not ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")
