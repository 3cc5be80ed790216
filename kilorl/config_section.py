"""The base of every configuration section (kept apart so algorithm configs can use it).

Every section forbids unknown keys, so a typo is an error that names the field, and reads
attribute docstrings into field descriptions (``kilorl train --help`` and the docs use them).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A strict configuration section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)
