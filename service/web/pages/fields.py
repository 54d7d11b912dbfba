"""The API's field and parameter names in a refusal ("rfp.title: must not be blank", "page must
be a positive integer"), said as the pages' forms and links name them ("The title: must not be
blank", "The page number must be …"). The domain's refusals are the API's, which keeps its names
for integrations; error_page and the signed-out forms put them in these words."""

from __future__ import annotations

import re
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
    # The query parameters of the pages' addresses (a 400 names the one it refused first) and of
    # the upload and export the RFP page sends (header_row only from a form made by hand).
    "page": "The page number", "invitations_page": "The page number of the invitations",
    "format": "The export format", "answers": "The answers to export",
    "unanswered": "The text for unanswered questions", "header_row": "The header row",
}

# An API name in running text ("Name it with question_column", "the answer_column was not
# found"): snake_case or dotted, a token whole; a "the" before it is the words' own.
_NAME_IN_TEXT = re.compile(r"(?<![\w.])(?:([Tt]he) )?([a-z][a-z0-9]*(?:[._][a-z0-9]+)+)(?![\w]|\.\w)")


def _name_in_text(found: re.Match[str]) -> str:
    article, name = found.group(1), found.group(2)
    words = FIELD_WORDS.get(name)
    if words is None:
        return found.group(0)
    if words.startswith("The "):
        words = words[4:]
        article = article or ("The" if found.start() == 0 else "the")
        return f"{article} {words}"
    return f"{article} {words}" if article else words


def said_in_words(text: str, *, names_first: bool = False) -> str:
    """`text` with each snake_case or dotted API name the pages know said in words; with
    `names_first` (a refused query parameter: "page must be …"), its first word too."""
    name, space, rest = text.partition(" ")
    if names_first and space and name in FIELD_WORDS:
        text = f"{FIELD_WORDS[name]} {rest}"
    return _NAME_IN_TEXT.sub(_name_in_text, text)


def in_words(details: Iterable[str] | None) -> list[str]:
    """`details` with each API field name the pages know said in words: the field a detail
    starts with, and any it names in its text."""
    said = []
    for detail in details or ():
        name, colon, rest = detail.partition(": ")
        if colon and name in FIELD_WORDS:
            said.append(f"{FIELD_WORDS[name]}: {said_in_words(rest)}")
        else:
            said.append(said_in_words(detail))
    return said
