"""The default engine: offline and deterministic. Reuses an entry verbatim when one answers the
question, otherwise extracts the sentences of the best entries that speak to it."""

from __future__ import annotations

import re

from . import AnswerRequest, Draft, coverage

NOT_COVERED = (
    "The knowledge base does not cover this question, so no answer was drafted. "
    "Answer it by hand, or add an entry that answers it and ask again."
)
# Sentences kept in an extractive answer, by detail level (low, normal, high).
SENTENCES = (1, 3, 6)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


class LocalEngine:
    name = "local"

    async def answer(self, request: AnswerRequest) -> Draft:
        matches = coverage.rank(request.question, request.references)
        points: tuple[str, ...] = ()
        if request.custom_prompt:
            points = ("The local engine does not follow custom prompts; check the answer against: "
                      f"“{request.custom_prompt[:200]}”.",)
        if not coverage.covered(matches):
            return Draft(text=NOT_COVERED, sufficient_context=False, attention_points=points)

        best = matches[0]
        level = request.detail_level
        if coverage.answers_alone(best):
            text = best.reference.answer.strip()
            used = [best.reference.kb_item_id]
            if level == 0:
                # Low: the shortest faithful answer is the entry's first sentence.
                text = sentences(text)[0]
            elif level == 2:
                # High: the entry, then supporting material from other relevant entries.
                extra = [m for m in coverage.relevant(matches[1:3])]
                for m in extra:
                    text += "\n\n" + m.reference.answer.strip()
                    used.append(m.reference.kb_item_id)
            if text == best.reference.answer.strip():
                text = best.reference.answer  # exactly the entry's answer: verbatim
            return Draft(text=text, sufficient_context=True, used=tuple(used), attention_points=points)

        # Extractive: the sentences of the relevant entries that share most terms with the question.
        wanted = coverage.terms(request.question)
        candidates: list[tuple[float, int, str, str]] = []
        for order, m in enumerate(coverage.relevant(matches)[:3]):
            for position, sentence in enumerate(sentences(m.reference.answer)):
                overlap = len(wanted & coverage.terms(sentence)) / max(1, len(wanted))
                # Entry relevance first, then the sentence's own overlap, then reading order.
                weight = m.score + overlap - 0.01 * position
                candidates.append((weight, order * 1000 + position, sentence, m.reference.kb_item_id))
        chosen = sorted(candidates, key=lambda c: -c[0])[: SENTENCES[level]]
        chosen.sort(key=lambda c: c[1])  # keep each entry's own sentence order
        used = tuple(dict.fromkeys(c[3] for c in chosen))
        return Draft(
            text=" ".join(c[2] for c in chosen),
            sufficient_context=True,
            used=used,
            attention_points=points,
        )
