"""Whether retrieved references answer a question, and how confident that makes us.

All score thresholds live here, so a calibrated coverage model can replace `assess` later
without touching the engines or the pipeline.
"""

from __future__ import annotations

import re

import attrs

from ..retrieval import Reference

# A reference whose match is at least this answers the question on its own: reuse it verbatim.
VERBATIM_MATCH = 0.75
# Below this, nothing retrieved is about the question: say the knowledge base does not cover it.
COVERED_MATCH = 0.35
# Answers under this confidence need a person's look before they are relied on.
ATTENTION_BELOW = 0.6
# How much of a reference's match comes from our own term overlap vs. the retrieval score.
LEXICAL_WEIGHT = 0.75

_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    """a about above after all also am an and any are as at be been being both but by can could
    did do does doing done for from had has have having how i if in into is it its itself just may
    me might must my no nor not of off on once only or other our ours out over own please provide
    same shall should so some such than that the their theirs them then there these they this
    those through to too under until up very was we were what when where which while who whom why
    will with would you your yours describe explain list state""".split()
)


def terms(text: str | None) -> set[str]:
    """Content words of a text, lower-cased, crudely stemmed (plural and -ing/-ed endings)."""
    found = set()
    for word in _WORD.findall((text or "").lower()):
        if word in STOPWORDS or len(word) < 2:
            continue
        for suffix in ("ing", "ed", "es", "s"):
            if len(word) > len(suffix) + 3 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
        found.add(word)
    return found


@attrs.frozen(kw_only=True)
class Match:
    reference: Reference
    score: float  # in [0, 1]: how well this entry answers the question
    missing: frozenset[str]  # question terms the entry does not mention


def match(question: str, reference: Reference) -> Match:
    wanted = terms(question)
    if not wanted:
        return Match(reference=reference, score=0.0, missing=frozenset())
    asked = terms(reference.question)
    everything = asked | terms(reference.title) | terms(reference.answer)
    by_question = len(wanted & asked) / len(wanted)
    anywhere = len(wanted & everything) / len(wanted)
    lexical = max(by_question, 0.8 * anywhere)
    score = LEXICAL_WEIGHT * lexical + (1 - LEXICAL_WEIGHT) * max(0.0, min(1.0, reference.score))
    return Match(reference=reference, score=round(score, 4), missing=frozenset(wanted - everything))


def rank(question: str, references: tuple[Reference, ...] | list[Reference]) -> list[Match]:
    """The references as matches, best first (retrieval order breaks ties)."""
    matches = [match(question, ref) for ref in references]
    return sorted(matches, key=lambda m: -m.score)


def relevant(matches: list[Match]) -> list[Match]:
    return [m for m in matches if m.score >= COVERED_MATCH]


def covered(matches: list[Match]) -> bool:
    return bool(matches) and matches[0].score >= COVERED_MATCH


def answers_alone(best: Match) -> bool:
    return best.score >= VERBATIM_MATCH and bool(best.reference.question)


@attrs.frozen(kw_only=True)
class Assessment:
    confidence: float
    rationale: str
    requires_attention: bool
    attention_points: tuple[str, ...]


def _label(ref: Reference) -> str:
    name = f"“{ref.title}”" if ref.title else f"“{(ref.question or ref.answer)[:60]}”"
    external = f", external id {ref.external_id}" if ref.external_id else ""
    return f"{name} ({ref.kb_item_id}{external})"


def assess(
    question: str,
    references: list[Reference],
    *,
    answer: str | None,
    verbatim: bool,
    sufficient_context: bool,
    used: tuple[str, ...],
    engine_points: tuple[str, ...] = (),
    failure: str | None = None,
) -> Assessment:
    """Confidence in [0, 1], what it rests on, and what a person should check."""
    if failure is not None:
        return Assessment(
            confidence=0.0,
            rationale="No answer: the answer engine failed, so there is nothing to be confident in.",
            requires_attention=True,
            attention_points=(f"The answer engine failed ({failure}); the credit was refunded. "
                              "Ask again later or answer by hand.", *engine_points),
        )
    matches = rank(question, references)
    if not sufficient_context or not covered(matches):
        nearest = (f" The nearest entry, {_label(matches[0].reference)}, matches "
                   f"{matches[0].score:.0%} of it." if matches else "")
        points = [f"The knowledge base has no entry that answers this question.{nearest} "
                  "Answer it by hand, and consider adding the answer to the knowledge base."]
        return Assessment(
            confidence=round(min(0.2, matches[0].score / 2) if matches else 0.0, 4),
            rationale=("Not covered: no knowledge-base entry matches the question well enough "
                       f"(best match {matches[0].score:.2f}, needed {COVERED_MATCH})." if matches
                       else "Not covered: retrieval found no knowledge-base entry sharing its terms."),
            requires_attention=True,
            attention_points=(*points, *engine_points),
        )

    by_id = {m.reference.kb_item_id: m for m in matches}
    drawn = [by_id[i] for i in used if i in by_id] or matches[:1]
    best = drawn[0]
    points: list[str] = []
    if verbatim:
        confidence = best.score
        rationale = (f"Verbatim reuse of {_label(best.reference)}, whose text matches "
                     f"{best.score:.0%} of the question (retrieval score {best.reference.score:.2f}).")
    else:
        # Composed text is a step removed from any single entry: a little less sure.
        confidence = best.score * (0.9 if len(drawn) > 1 else 0.95)
        rationale = (f"Composed from {len(drawn)} entr{'y' if len(drawn) == 1 else 'ies'}; the best, "
                     f"{_label(best.reference)}, matches {best.score:.0%} of the question.")
        if len(drawn) > 1:
            points.append("The answer combines " + ", ".join(_label(m.reference) for m in drawn)
                          + "; check that they agree and are equally current.")
    if best.missing:
        points.append("The question mentions " + ", ".join(f"“{t}”" for t in sorted(best.missing))
                      + f" which {_label(best.reference)} does not address; confirm the answer covers it.")
    points.append(f"Check that {_label(best.reference)} still reflects current practice.")
    confidence = round(max(0.0, min(1.0, confidence)), 4)
    requires_attention = confidence < ATTENTION_BELOW or not answer
    return Assessment(
        confidence=confidence,
        rationale=rationale,
        requires_attention=requires_attention,
        attention_points=(*points, *engine_points),
    )
