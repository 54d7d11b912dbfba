"""The one cattrs converter: JSON values in (strict, with per-field errors) and models out.

Field rules live in the types below (`NonBlank`, `Framework`, `HttpUrl`, `IsoDate`), so cattrs'
detailed validation reports every failing field at once: exactly the `details` of a 422.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any, NewType, TypeVar
from urllib.parse import urlsplit

import attrs
import cattrs

from .errors import ValidationFailed

T = TypeVar("T")

NonBlank = NewType("NonBlank", str)
Framework = NewType("Framework", str)
HttpUrl = NewType("HttpUrl", str)
IsoDate = NewType("IsoDate", date)

FRAMEWORKS = ("nist-csf-2.0", "hecvat-3.06", "hecvat-4.1", "rh-1.0", "cjis-5", "cjis-6")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

converter = cattrs.Converter(forbid_extra_keys=True)


def timestamp(value: datetime) -> str:
    """A point in time as the API writes it: ISO 8601 in UTC, with `Z`."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _strict_str(value: Any, _: type) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {_json_type(value)}")
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _strict_int(value: Any, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, got {_json_type(value)}")
    return value


def _strict_bool(value: Any, _: type) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {_json_type(value)}")
    return value


def _strict_float(value: Any, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, got {_json_type(value)}")
    return float(value)


def _non_blank(value: Any, _: type) -> str:
    text = _strict_str(value, str)
    if not text.strip():
        raise ValueError("must not be blank")
    return text


def _framework(value: Any, _: type) -> str:
    text = _strict_str(value, str)
    if text not in FRAMEWORKS:
        raise ValueError(f"must be one of {', '.join(FRAMEWORKS)}; got {text!r}")
    return text


def _http_url(value: Any, _: type) -> str:
    text = _strict_str(value, str)
    try:
        parts = urlsplit(text)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and " " not in text
    except ValueError:
        valid = False
    if not valid:
        raise ValueError(f"must be an absolute http(s) URI; got {text!r}")
    return text


def _iso_date(value: Any, _: type) -> date:
    text = _strict_str(value, str)
    try:
        if not _ISO_DATE.match(text):
            raise ValueError
        return date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"must be a date as YYYY-MM-DD; got {text!r}") from None


def at_most(limit: int) -> Any:
    """An attrs validator: a string field (None allowed) of at most `limit` characters."""

    def check(instance: object, attribute: Any, value: str | None) -> None:
        if value is not None and len(value) > limit:
            raise ValueError(f"{attribute.name} must be at most {limit} characters")

    return check


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


converter.register_structure_hook(str, _strict_str)
converter.register_structure_hook(int, _strict_int)
converter.register_structure_hook(bool, _strict_bool)
converter.register_structure_hook(float, _strict_float)
converter.register_structure_hook(NonBlank, _non_blank)
converter.register_structure_hook(Framework, _framework)
converter.register_structure_hook(HttpUrl, _http_url)
converter.register_structure_hook(IsoDate, _iso_date)
converter.register_unstructure_hook(datetime, timestamp)
converter.register_unstructure_hook(date, lambda d: d.isoformat())


def _describe(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, KeyError):
        return "is required"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown field(s): {', '.join(sorted(exc.extra_fields))}"
    if type(exc) is ValueError and str(exc):
        return str(exc)
    if isinstance(exc, TypeError | ValueError) and type_ is not None:
        if getattr(type_, "__attrs_attrs__", None) is not None:
            return "must be an object"
        if getattr(type_, "__origin__", None) is list:
            return "must be an array"
    return cattrs.v.format_exception(exc, type_)


def validation_details(exc: Exception, root: str = "") -> list[str]:
    """cattrs' errors as `field.path: message`, one entry per failing field."""
    details = []
    for line in cattrs.transform_error(exc, path="$", format_exception=_describe):
        message, _, path = line.rpartition(" @ ")
        field = path.removeprefix("$").removeprefix(".")
        # A list at the root gives "[1].question": no dot between the root and the index.
        field = root + field if field.startswith("[") else ".".join(p for p in (root, field) if p)
        details.append(f"{field}: {message}" if field else message)
    return details


def structure(data: Any, cls: type[T], root: str = "") -> T:
    """Structure a JSON value into `cls`, raising a 422 with one entry per failing field."""
    if attrs.has(cls) and not isinstance(data, dict):
        # cattrs would call .keys() on it and fail with an AttributeError (a 500).
        raise ValidationFailed([f"{root or 'the body'}: must be a JSON object, got {_json_type(data)}"])
    try:
        return converter.structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        raise ValidationFailed(validation_details(exc, root)) from None


def unstructure(obj: Any) -> Any:
    return converter.unstructure(obj)
