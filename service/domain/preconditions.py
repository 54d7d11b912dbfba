"""Writes conditional on the version a client last read (HTTP's If-Match, and the web app's edit
forms): an entry's or an RFP item's tag, and the check a write makes of it under its row lock.

Without it two reviewers who opened the same item each saved over the other unseen: the second
"Approve" wrote the answer its page showed back over the first one's edit, and approved it.

A tag is opaque to clients (the API sends it as the ETag of the record's GET and PATCH): an
entry's is its version (every change of its content raises it, library's versioning trigger); an
RFP item's is the time it was last written, in microseconds (every write of its question,
section, answer, state or assignee stamps updated_at)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta

from .errors import PreconditionFailed

# If-Match: * : any version, as long as the record exists (RFC 9110 13.1.1).
ANY = "*"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def entry_tag(version: int) -> str:
    return f"v{version}"


def item_tag(updated_at: datetime) -> str:
    return f"t{(updated_at - _EPOCH) // timedelta(microseconds=1)}"


def check(if_match: Collection[str] | None, tag: str, what: str) -> None:
    """Refuse the write (PreconditionFailed, 412) unless `if_match` (None: no condition) holds
    `tag` or ANY. Called with the record locked, so nothing can change it between."""
    if if_match is None or ANY in if_match or tag in if_match:
        return
    raise PreconditionFailed(
        f"{what} has changed since it was read (its version is now \"{tag}\"); nothing was saved:"
        " read it again and make the change there",
        headers={"ETag": f'"{tag}"'},
    )
