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

        # Extractive: greedily the sentences of the relevant entries that cover the most question
        # terms not covered yet (entry relevance breaks ties), up to the detail level's count.
        wanted = coverage.terms(request.question)
        candidates = [
            (m.score, order * 1000 + position, sentence, m.reference.kb_item_id,
             coverage.terms(sentence))
            for order, m in enumerate(coverage.relevant(matches)[:3])
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
        used = tuple(dict.fromkeys(c[3] for c in sorted(chosen, key=lambda c: -c[0])))
        return Draft(
            text=" ".join(c[2] for c in chosen),
            sufficient_context=True,
            used=used,
            attention_points=points,
        )
