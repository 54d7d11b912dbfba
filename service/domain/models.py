"""Domain records as they leave the service; each is built from a database row in one place."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from .errors import ParameterInvalid

PAGE_SIZE = 20


@attrs.frozen(kw_only=True)
class MemberRef:
    """The owner of an RFP, assignee of an item or asker of a question: the user's integer id,
    name and e-mail."""

    id: int
    name: str
    email: str

    @classmethod
    def assignee_of(cls, row: Mapping[str, Any]) -> MemberRef | None:
        """The assignee of an item's row (assignee_id, _name and _email), None when unassigned."""
        if row.get("assignee_id") is None:
            return None
        return cls(id=row["assignee_id"], name=row["assignee_name"], email=row["assignee_email"])


def rfp_json(row: Mapping[str, Any], web_base_url: str, *, with_context: bool) -> dict[str, Any]:
    """An RFP as it leaves the service (OpenAPI schema `Rfp`), built straight from its row, for
    `responses.json_response`. The single-RFP read is the service's hottest path; attrs objects
    and cattrs were a tenth of its CPU there (BENCHMARKS.md, HTTP). SPEC 2.1: `context` only in
    the single-RFP read."""
    rfp_id = row["id"]
    deadline = row["deadline"]
    data = {
        "id": rfp_id,
        "web_link": f"{web_base_url.rstrip('/')}/rfps/{rfp_id}",
        "title": row["title"],
        "description": row["description"],
        "deadline": None if deadline is None else deadline.isoformat(),
        "state": row["state"],
        "framework": row["framework"],
        "portal_url": row["portal_url"],
    }
    if with_context:
        data["context"] = row["context"]
    # Left as datetimes: responses.dumps writes them as responses.timestamp does, ~5 µs sooner.
    data["created_at"] = row["created_at"]
    data["updated_at"] = row["updated_at"]
    data["owner"] = {"id": row["owner_id"], "name": row["owner_name"], "email": row["owner_email"]}
    data["stats"] = {
        "total_items": row["total_items"],
        "needs_input_items": row["needs_input_items"],
        "auto_answered_items": row["auto_answered_items"],
        "approved_items": row["approved_items"],
        "overall_completion_percentage": row["overall_completion_percentage"],
    }
    return data


@attrs.frozen(kw_only=True)
class RfpItem:
    id: str
    rfp_id: str
    question: str
    answer: str | None
    state: str
    confidence: float | None
    section: str | None
    position: int
    created_at: datetime
    updated_at: datetime
    # The question answering (or that answered) this item, and the knowledge-base entry its
    # approved answer was saved as.
    question_id: str | None = None
    knowledge_item_id: str | None = None
    # The member who answers it (a row with an assignee_id carries assignee_name and _email).
    assignee: MemberRef | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RfpItem:
        return cls(
            id=row["id"],
            rfp_id=row["rfp_id"],
            question=row["question"],
            answer=row["answer"],
            state=row["state"],
            confidence=None if row["confidence"] is None else round(float(row["confidence"]), 4),
            section=row["section"],
            position=row["position"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            question_id=row.get("question_id"),
            knowledge_item_id=row.get("knowledge_item_id"),
            assignee=MemberRef.assignee_of(row),
        )


@attrs.frozen(kw_only=True)
class Page:
    """A requested page: 1-based number, fixed size."""

    number: int
    size: int = PAGE_SIZE

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    @classmethod
    def from_query(
        cls, query: Mapping[str, str], size: int = PAGE_SIZE, max_rows: int | None = None
    ) -> Page:
        """The page a query asks for. With `max_rows`, a page reaching past that many rows is
        refused (400 naming the last page): OFFSET reads every row it skips."""
        raw = query.get("page")
        if raw is None or raw == "":
            return cls(number=1, size=size)
        digits = raw.lstrip("0") if raw.isascii() and raw.isdigit() else ""
        if not digits:  # not digits, or 0
            raise ParameterInvalid(f"page must be a positive integer; got {raw[:20]!r}")
        # Its length first: Python refuses to read an integer of over 4,300 digits (a 500).
        if len(digits) > 8 or int(digits) > 10_000_000:
            raise ParameterInvalid("page is out of range")
        number = int(digits)
        if max_rows is not None and number > max_rows // size:
            raise ParameterInvalid(
                f"page must be at most {max_rows // size}: results stop at the first {max_rows:,};"
                f" narrow the search to reach others"
            )
        return cls(number=number, size=size)

    def pagination(self, total_count: int, shown: int) -> dict[str, Any]:
        """The SPEC 2.5 object for this page given the total and the rows on it."""
        return {
            "current_page": self.number,
            "total_pages": math.ceil(total_count / self.size),
            "total_count": total_count,
            "items_per_page": self.size,
            "from": self.offset + 1 if shown else None,
            "to": self.offset + shown if shown else None,
        }
