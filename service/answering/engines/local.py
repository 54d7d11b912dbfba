"""The default engine: offline and deterministic. Whether the knowledge base covers the question
is the calibrated decision of `service.coverage`; when it does, the engine reuses the first entry
verbatim when it answers the question on its own, otherwise extracts the sentences of the entries
that speak to it. A yes/no question is answered "Yes"/"No" first when the entry says so."""

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
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# A question that asks for a yes or a no: it opens with an auxiliary verb.
_YES_NO_QUESTION = re.compile(
    r"^\s*(?:do|does|did|is|are|was|were|can|could|will|would|should|shall|has|have|had|may|must)\b",
    re.IGNORECASE,
)
_YES_NO_ANSWER = re.compile(r"^\s*(yes|no)\b", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


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
        best_match = coverage.match(request.question, best)
        if decision.exact or (best_match.score >= coverage.VERBATIM_MATCH and best.question):
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

        # Extractive: greedily the sentences of the relevant entries (the decided one first) that
        # cover the most question terms not covered yet, up to the detail level's count.
        wanted = coverage.terms(request.question)
        sources = [best_match] + [m for m in coverage.relevant(request.question, references[1:3])]
        candidates = [
            (m.score, order * 1000 + position, sentence,
             m.reference.kb_item_id, coverage.terms(sentence))
            for order, m in enumerate(sources)
            for position, sentence in enumerate(sentences(m.reference.answer))
        ]
        chosen: list[tuple] = []
        uncovered = set(wanted)
        while candidates and len(chosen) < SENTENCES[level]:
            best_sentence = max(
                candidates,
                key=lambda c, left=frozenset(uncovered): (
                    len(c[4] & left) / max(1, len(wanted)) + 0.3 * c[0] - 0.001 * (c[1] % 1000)
                ),
            )
            if chosen and not best_sentence[4] & uncovered and level < 2:
                break  # nothing new to say; high detail keeps adding supporting sentences
            chosen.append(best_sentence)
            candidates.remove(best_sentence)
            uncovered -= best_sentence[4]
        chosen.sort(key=lambda c: c[1])  # keep each entry's own sentence order
        # The decided entry first: the decision and the confidence are about it.
        used = tuple(dict.fromkeys(c[3] for c in sorted(chosen, key=lambda c: (c[1] // 1000))))
        return Draft(
            text=yes_no_first(request.question, " ".join(c[2] for c in chosen), best.answer,
                              best.yes_no),
            sufficient_context=True,
            used=used,
            attention_points=points,
        )
