"""The API's field names in a refusal's details ("rfp.title: must not be blank"), said as the
pages' forms name the fields ("The title: must not be blank"). The domain's refusals are the
API's; error_page and the signed-out forms put them in these words."""

from __future__ import annotations

from collections.abc import Iterable

# Each API field a page's form sends, in the words of the form's label. A detail whose field is
# not here (a CSV file's own column, a message with no field) is shown as it is.
FIELD_WORDS = {
    # The RFPs page's new RFP.
    "rfp.title": "The title", "rfp.description": "The description",
    "rfp.deadline": "The deadline", "rfp.framework": "The framework",
    "rfp.portal_url": "The portal link", "rfp.context": "The context for the answers",
    # An item's form on the RFP page (domain rfp_items.review_item), its assignee and "answer all".
    "rfp_item.answer": "The answer", "rfp_item.question": "The question",
    "rfp_item.section": "The section", "rfp_item.state": "The item's state",
    "rfp_item.save_to_knowledge_base": "Saving to the knowledge base",
    "rfp_item.assignee_id": "The assignee",
    "max_items": "The number of items to answer",
    # A questionnaire's upload (the RFP page) and the knowledge base's CSV import.
    "file": "The file", "sheet": "The sheet", "question_column": "The question column",
    "section_column": "The section column", "answer_column": "The answer column",
    "csv": "The CSV file",
    # A knowledge base entry.
    "knowledge_base_item.question": "The question", "knowledge_base_item.answer": "The answer",
    "knowledge_base_item.title": "The title", "knowledge_base_item.tags": "The tags",
    "knowledge_base_item.source": "The source", "knowledge_base_item.yes_no": "Yes/No",
    # The Ask page.
    "question.question": "The question", "question.answer_detail_level": "The detail",
    # The Members page.
    "invitation.email": "The e-mail address", "invitation.role": "The role",
    "member.role": "The role",
    # Accepting an invitation, confirming an address, a new password.
    "password": "The password", "terms_of_service": "The terms of service",
    "first_name": "The first name", "last_name": "The last name",
}


def in_words(details: Iterable[str] | None) -> list[str]:
    """`details` with each API field name the pages know said in words."""
    said = []
    for detail in details or ():
        name, colon, rest = detail.partition(": ")
        said.append(f"{FIELD_WORDS[name]}: {rest}" if colon and name in FIELD_WORDS else detail)
    return said
