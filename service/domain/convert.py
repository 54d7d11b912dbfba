"""The one cattrs converter: JSON values in (strict, with per-field errors) and models out, with
every field type the service validates (registered here, in one place).

Field rules live in the types below (`NonBlank`, `Framework`, `HttpUrl`, `IsoDate`), so cattrs'
detailed validation reports every failing field at once: exactly the `details` of a 422.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from typing import Any, NewType, TypeVar
from urllib.parse import urlsplit

import attrs
import cattrs

from ..config import strict_converter
from .errors import ValidationFailed
from .passwords import MAX_LENGTH, MIN_LENGTH
from .tokens import ROLES, SCOPES

T = TypeVar("T")

NonBlank = NewType("NonBlank", str)
Framework = NewType("Framework", str)
HttpUrl = NewType("HttpUrl", str)
IsoDate = NewType("IsoDate", date)

FRAMEWORKS = ("nist-csf-2.0", "hecvat-3.06", "hecvat-4.1", "rh-1.0", "cjis-5", "cjis-6")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")



_strict_scalars = strict_converter(shown=lambda value: _json_type(value))
converter = strict_converter(shown=lambda value: _json_type(value))


def timestamp(value: datetime) -> str:
    """A point in time as the API writes it: ISO 8601 in UTC, with `Z`."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _strict_str(value: Any, _: type) -> str:
    text = _strict_scalars.structure(value, str)
    if "\x00" in text:
        raise ValueError("must not contain NUL characters")
    return text


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
    try:
        port = parts.port  # urlsplit reads the port only when asked: 99999999 passed unseen
    except ValueError:
        port = 0
    if port == 0:  # ":0", or out of range or not a number
        raise ValueError(f"has an invalid port (must be a number from 1 to 65535); got {text!r}")
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
            raise ValueError(f"must be at most {limit} characters")

    return check


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


Email = NewType("Email", str)


Password = NewType("Password", str)


PersonName = NewType("PersonName", str)


Role = NewType("Role", str)


Scope = NewType("Scope", str)


TermsAcceptance = NewType("TermsAcceptance", bool)


TERMS_ACCEPTED = ("accepted", "true", "1", "yes")
MAX_NAME = 100


# A plain addr-spec (RFC 5322 dot-atom on both sides): a local part of atext (letters, digits and
# !#$%&'*+/=?^_`{|}~-; non-ASCII letters too, RFC 6531) and dots, "@", and a domain of two or more
# labels (letters, digits, inner hyphens) whose last is not all digits. No quoted local part, no
# [address literal], no angle brackets, spaces or comments: none of them is needed to reach
# someone, and each was accepted before (a probe invited `x"<svg/onload=alert(1)>@demo.example`).
_ATEXT = r"[\w!#$%&'*+/=?^`{|}~-]+"
_LABEL = r"[^\W_](?:[^\W_]|-)*(?<!-)"
_EMAIL = re.compile(
    rf"{_ATEXT}(?:\.{_ATEXT})*@(?:{_LABEL}\.)+(?!\d+$){_LABEL}"
)


def _string(value: Any) -> str:
    return converter.structure(value, str)


def _email(value: Any, _: type) -> str:
    text = _string(value).strip()
    if not text:
        raise ValueError("must not be blank")
    local, _, domain = text.rpartition("@")
    if (len(text) > 254 or len(local) > 64 or not _EMAIL.fullmatch(text)
            or any(len(label) > 63 for label in domain.split("."))):
        raise ValueError("is not a valid e-mail address: expected a plain address such as "
                         "name@example.com, without quotes, brackets, angle brackets or spaces")
    return text


def _password(value: Any, _: type) -> str:
    text = _string(value)
    if len(text) < MIN_LENGTH:
        raise ValueError(f"is too short (minimum is {MIN_LENGTH} characters)")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"is too long (maximum is {MAX_LENGTH} characters)")
    if not text.strip():
        raise ValueError("must not be only whitespace")
    return text


def _person_name(value: Any, _: type) -> str:
    text = _string(value).strip()
    if len(text) > MAX_NAME:
        raise ValueError(f"is too long (maximum is {MAX_NAME} characters)")
    return text


def _role(value: Any, _: type) -> str:
    text = _string(value)
    if text not in ROLES:
        raise ValueError(f"must be one of {', '.join(ROLES)}; got {text!r}")
    return text


def _scope(value: Any, _: type) -> str:
    text = _string(value)
    if text not in SCOPES:
        raise ValueError(f"must be one of {', '.join(SCOPES)}; got {text!r}")
    return text


def _terms(value: Any, _: type) -> bool:
    if value is True or (isinstance(value, str) and value.strip().lower() in TERMS_ACCEPTED):
        return True
    raise ValueError('must be accepted explicitly: true or "accepted"')
















DETAIL_LEVELS = ("low", "normal", "high")
DetailLevel = NewType("DetailLevel", int)


def _detail_level(value: Any, _: type) -> int:
    # A structure hook, not a validator, so it is reported together with the other fields' errors.
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1, 2):
        raise ValueError(f"must be 0 (low), 1 (normal) or 2 (high); got {json.dumps(value)}")
    return value




PositiveCount = NewType("PositiveCount", int)


def _positive_count(value: Any, _: type) -> int:
    # JSON's whole numbers only: cattrs' int() would take true, "5" and 5.7 (and a number past
    # PostgreSQL's bigint would fail the query); the field's own validator sets its upper bound.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a whole number of at least 1; got {json.dumps(value)[:40]}")
    return value


TagList = NewType("TagList", list)


def _tag_list(value: Any, _: type) -> list[str]:
    # cattrs would take a string for a list of its characters.
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise ValueError("must be an array of strings")
    if any("\x00" in tag for tag in value):  # as every other string (_strict_str)
        raise ValueError("must not contain NUL characters")
    return value




UserId = NewType("UserId", int)


def is_user_id(value: Any) -> bool:
    """Whether a JSON value can be a user id: JSON true is not user 1, nor "7" user 7; past
    PostgreSQL's bigint no user exists."""
    return not isinstance(value, bool) and isinstance(value, int) and 0 < value < 2**63


def _user_id(value: Any, _: type) -> int:
    if not is_user_id(value):
        raise ValueError(f"must be a user id (a positive integer) or null; got {json.dumps(value)[:40]}")
    return value


REVIEW_STATES = ("approved", "discarded", "pending")


ReviewState = NewType("ReviewState", str)


def _review_state(value: Any, _: type) -> str:
    if value not in REVIEW_STATES:
        raise ValueError(f"must be one of {', '.join(REVIEW_STATES)}; got {value!r}")
    return value


converter.register_structure_hook(str, _strict_str)
converter.register_structure_hook(NonBlank, _non_blank)
converter.register_structure_hook(Framework, _framework)
converter.register_structure_hook(HttpUrl, _http_url)
converter.register_structure_hook(IsoDate, _iso_date)
converter.register_structure_hook(Email, _email)
converter.register_structure_hook(Password, _password)
converter.register_structure_hook(PersonName, _person_name)
converter.register_structure_hook(Role, _role)
converter.register_structure_hook(Scope, _scope)
converter.register_structure_hook(TermsAcceptance, _terms)
converter.register_structure_hook(DetailLevel, _detail_level)
converter.register_structure_hook(PositiveCount, _positive_count)
converter.register_structure_hook(TagList, _tag_list)
converter.register_structure_hook(ReviewState, _review_state)
converter.register_structure_hook(UserId, _user_id)
converter.register_unstructure_hook(datetime, timestamp)
converter.register_unstructure_hook(date, lambda d: d.isoformat())


def _arrays_only(type_: Any) -> Any:
    """A list field takes a JSON array only. cattrs takes any iterable: a string was read as its
    characters, each reported on its own ("rfp.items[0]: …" for each of 100,000 characters, 7 s
    of CPU and a 3.5 MB reply)."""
    structure_list = cattrs.cols.list_structure_factory(type_, converter)

    def structure(value: Any, _: type) -> Any:
        if not isinstance(value, list):
            raise ValueError("must be an array")
        return structure_list(value, type_)

    return structure


converter.register_structure_hook_factory(cattrs.cols.is_mutable_sequence, _arrays_only)


def _field_validators_reported(cls: type) -> Any:
    """A class whose fields have attrs validators (`at_most`, a list's own rule) is structured as
    cattrs does, but a validator's refusal is reported like a field type's: under its field's
    path, one entry per field, beside the other fields' errors. Left to `__init__`, the first
    refusal came alone and without its field ("rfp: title must be …"), and none came when another
    field had failed to structure."""
    structure = cattrs.gen.make_dict_structure_fn(cls, converter)
    checked = [a for a in attrs.fields(cls) if a.validator is not None]

    def refusals(data: Any, failed: set[str]) -> list[Exception]:
        found = []
        for attribute in checked:
            if attribute.name in failed or not isinstance(data, dict) or attribute.name not in data:
                continue
            try:  # the field's value as structured (it did structure), then its validator
                value = converter.structure(data[attribute.name], attribute.type)
                attribute.validator(None, attribute, value)
            except ValueError as refusal:
                refusal.__notes__ = [cattrs.AttributeValidationNote(
                    f"Structuring class {cls.__qualname__} @ attribute {attribute.name}",
                    attribute.name, attribute.type)]
                found.append(refusal)
        return found

    def fields_of(error: BaseException) -> set[str]:
        return {note.name for note in getattr(error, "__notes__", ())
                if isinstance(note, cattrs.AttributeValidationNote)}

    def structure_reporting(data: Any, _: type) -> Any:
        try:
            return structure(data, cls)
        except cattrs.ClassValidationError as exc:
            found = refusals(data, set().union(*map(fields_of, exc.exceptions)))
            if not found:
                raise
            # `__init__`'s refusal (every field structured, a validator refused one) comes as a
            # ValueError naming no field: `found` has it, with its field.
            kept = [e for e in exc.exceptions if fields_of(e) or type(e) is not ValueError]
            raise cattrs.ClassValidationError(exc.message, [*kept, *found], cls) from None

    return structure_reporting


converter.register_structure_hook_factory(
    lambda t: attrs.has(t) and any(a.validator is not None for a in attrs.fields(t)),
    _field_validators_reported,
)


def _describe(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, KeyError):
        return "is required"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return unknown_fields(exc.extra_fields)
    if type(exc) is ValueError and str(exc):
        return str(exc)
    if isinstance(exc, TypeError | ValueError | AttributeError) and type_ is not None:
        # A class's structuring reads its value as a mapping: a number fails with a TypeError,
        # a string or an array with an AttributeError (no .keys()).
        if getattr(type_, "__attrs_attrs__", None) is not None:
            return "must be an object"
        if getattr(type_, "__origin__", None) is list:
            return "must be an array"
    return cattrs.v.format_exception(exc, type_)


# A 422 for unknown fields names at most this many (of at most MAX_NAME_SHOWN characters each)
# and says how many more: 60,000 unknown keys made a 469 KB reply.
MAX_UNKNOWN_LISTED = 20
MAX_NAME_SHOWN = 64


def unknown_fields(names: Any) -> str:
    """`unknown field(s): a, b` for the first MAX_UNKNOWN_LISTED names (sorted), and how many more."""
    ordered = sorted(names)
    shown = [name if len(name) <= MAX_NAME_SHOWN else name[:MAX_NAME_SHOWN] + "…"
             for name in ordered[:MAX_UNKNOWN_LISTED]]
    more = len(ordered) - len(shown)
    return f"unknown field(s): {', '.join(shown)}" + (f" and {more:,} more" if more else "")


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
