"""The default engine: offline and deterministic. Whether the knowledge base covers the question
is the calibrated decision (answering/decision.py); when it does, the engine reuses the first
entry whole when the entry was written for this question (its own question says most of it),
otherwise quotes the entry's sentences that bear on the question, ranked by similarity.

"Yes."/"No." leads only when all three hold: the question asks for a yes or a no, the decision
says covered, and the entry's own yes/no answers this question (the entry was written for it).
An entry that mentions the question's subject in passing answers its own question, not this one."""

from __future__ import annotations

import re

from .. import decision as coverage
from . import AnswerRequest, Draft

NOT_COVERED = (
    "The knowledge base does not cover this question, so no answer was drafted. "
    "Answer it by hand, or add an entry that answers it and ask again."
)
# Sentences kept in an extractive answer, by detail level (low, normal, high).
SENTENCES = (1, 3, 6)
# A question that asks for a yes or a no: it opens with an auxiliary verb.
_YES_NO_QUESTION = re.compile(
    r"^\s*(?:do|does|did|is|are|was|were|can|could|will|would|should|shall|has|have|had|may|must)\b",
    re.IGNORECASE,
)
_YES_NO_ANSWER = re.compile(r"^\s*(yes|no)\b", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    return coverage.split_sentences(text) or [text.strip()]


def asks_yes_no(question: str) -> bool:
    return bool(_YES_NO_QUESTION.match(question))


def yes_no_of(answer: str) -> str | None:
    """"Yes" or "No" when the entry's answer opens with it, else None."""
    found = _YES_NO_ANSWER.match(answer)
    return found.group(1).capitalize() if found else None


def yes_no_first(question: str, text: str, entry_answer: str, entry_yes_no: bool | None = None) -> str:
    """`text` led by the entry's Yes/No when the question asks for one and the text lost it: the
    entry's own yes_no (a questionnaire's column) if it has one, else its answer's first word."""
    said = {True: "Yes", False: "No"}.get(entry_yes_no) or yes_no_of(entry_answer)
    if said is None or not asks_yes_no(question) or yes_no_of(text) is not None:
        return text
    return f"{said}. {text}"


class LocalEngine:
    name = "local"

    async def answer(self, request: AnswerRequest) -> Draft:
        references = list(request.references)
        points: tuple[str, ...] = ()
        if request.custom_prompt:
            points = ("The local engine does not follow custom prompts; check the answer against: "
                      f"“{request.custom_prompt[:200]}”.",)
        decision = coverage.decide(request.question, references)
        if not decision.sufficient:
            return Draft(text=NOT_COVERED, sufficient_context=False, attention_points=points)

        best = references[0]
        level = request.detail_level
        if decision.exact or coverage.same_subject(request.question, best):
            # The entry was written for this question: its whole answer, led by its own Yes/No.
            text = best.answer.strip()
            used = [best.kb_item_id]
            if level == 0:
                # Low: the shortest faithful answer is the entry's first sentence.
                text = sentences(text)[0]
            elif level == 2:
                # High: the entry, then supporting material from other relevant entries.
                for m in coverage.relevant(request.question, references[1:3]):
                    text += "\n\n" + m.reference.answer.strip()
                    used.append(m.reference.kb_item_id)
            if text == best.answer.strip():
                text = best.answer  # exactly the entry's answer: verbatim
            text = yes_no_first(request.question, text, best.answer, best.yes_no)
            return Draft(text=text, sufficient_context=True, used=tuple(used), attention_points=points)

        # Extractive: the entry was written for another question, so its Yes/No answers that
        # one, not this; quote the sentences of it that bear on this question, the most similar
        # first, as many as the detail level asks for, in the entry's own order. Then, room
        # left, sentences of the next relevant entries that say what those do not (any that bear,
        # at high detail).
        count = SENTENCES[level]
        chosen = [(0, position, sentence)
                  for _, position, sentence in coverage.bearing_sentences(request.question, best)[:count]]
        if not chosen:
            chosen = [(0, 0, sentences(best.answer)[0])]
        used = [best.kb_item_id]
        said = set().union(*(coverage.terms(sentence) for _, _, sentence in chosen))
        asked = coverage.terms(request.question)  # once, not once a sentence
        for order, m in enumerate(coverage.relevant(request.question, references[1:3]), 1):
            for _, position, sentence in coverage.bearing_sentences(request.question, m.reference):
                if len(chosen) >= count:
                    break
                new = coverage.terms(sentence) & asked - said
                if level < 2 and not new:
                    continue
                chosen.append((order, position, sentence))
                said |= coverage.terms(sentence)
                if m.reference.kb_item_id not in used:
                    used.append(m.reference.kb_item_id)
        chosen.sort()
        return Draft(text=" ".join(sentence for _, _, sentence in chosen), sufficient_context=True,
                     used=tuple(used), attention_points=points)
