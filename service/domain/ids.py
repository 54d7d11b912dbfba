"""Record ids: a prefix and 22 random base62 characters (`rfp_…`, `q_…`): unguessable and URL-safe."""

from __future__ import annotations

import secrets
import string

BASE62 = string.digits + string.ascii_letters
_ID_SPACE = 62**22  # uniform over every 22-character base62 string

# Every two-digit base62 string, so encoding takes half the divisions: token checksums are
# computed on every authenticated request.
_BASE62_PAIRS = [a + b for a in BASE62 for b in BASE62]


def base62(number: int, width: int) -> str:
    """`number` (< 62**width) as `width` base62 digits, most significant first."""
    parts = []
    for _ in range(width // 2):
        number, pair = divmod(number, 3844)
        parts.append(_BASE62_PAIRS[pair])
    if width % 2:
        parts.append(BASE62[number % 62])
    return "".join(reversed(parts))


def new_id(prefix: str) -> str:
    """A prefixed, unguessable, URL-safe id: `rfp_` + 22 base62 characters (~131 bits)."""
    return f"{prefix}_" + base62(secrets.randbelow(_ID_SPACE), 22)  # one draw, not 22


def could_be_id(text: str) -> bool:
    """Whether `text`, sent as a record's id (a form's value), can be looked up: ids are short,
    and PostgreSQL text cannot hold NUL (the query would fail: a 500). One that cannot is as
    unknown as an id no record has."""
    return 0 < len(text) <= 100 and "\x00" not in text
