"""A refused edit's message, placed next to the field it is about.

Every transport's messages name the field first ("occurred_at must be…", "metadata: …", several joined by
"; "), so the console can put each part beside its field; a message about no one field (the memory would
become identical to another) goes beside the form's button.
"""

from __future__ import annotations

import re

from memory_server.errors import AppError, InvalidParameters

EDIT_FIELDS = (
    "content",
    "type",
    "location",
    "project",
    "team",
    "bucket",
    "tags",
    "occurred_at",
    "supersedes",
    "expires_at",
    "metadata",
    "provenance",
)
LEADING_NAME = re.compile(r"^([a-z_]+)\b")
BOUND = re.compile(r"may only write memories with ([a-z_]+) in ")


class FieldErrors:
    """Messages by field name, and those about the form as a whole."""

    def __init__(self, code: str = "invalid_parameters") -> None:
        self.code = code
        self.fields: dict[str, list[str]] = {}
        self.form: list[str] = []

    def add(self, name: str | None, message: str) -> None:
        if name is None:
            self.form.append(message)
        else:
            self.fields.setdefault(name, []).append(message)

    def of(self, name: str) -> str:
        return "; ".join(self.fields.get(name, []))

    def __bool__(self) -> bool:
        return bool(self.fields or self.form)

    def as_error(self) -> InvalidParameters:
        parts = [message for messages in self.fields.values() for message in messages] + self.form
        return InvalidParameters("; ".join(parts))


def field_of(part: str) -> str | None:
    """The edit form's field a part of a message is about, if any."""
    leading = LEADING_NAME.match(part)
    if leading and leading.group(1) in EDIT_FIELDS:
        return leading.group(1)
    bound = BOUND.search(part)
    if bound and bound.group(1) in EDIT_FIELDS:
        return bound.group(1)
    if "supersede" in part:  # a reference to supersede that is unknown, out of bounds or a cycle
        return "supersedes"
    return None


def field_errors(error: AppError) -> FieldErrors:
    errors = FieldErrors(error.code)
    for part in error.message.split("; "):
        errors.add(field_of(part), part)
    return errors
