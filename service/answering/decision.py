"""Coverage: does the knowledge base answer a question, and how sure are we? The one place.

`decide` says whether the first retrieved reference answers the question, from a small logistic
model over features of the retrieval (`features`); its coefficients are data
(`decision_model.json`), written only by `python -m service eval … --fit`, which fits it by k-fold
cross-validation over the development sets (service/answering/evaluation.py).

Confidence is the model's probability that the first reference answers the question: a
calibrated probability (a logistic model fitted by likelihood is Platt scaling of its own score),
checked out of sample by `eval`'s calibration table. The model file carries a `cap`: confidence
stays below it unless cross-validation showed that ≥ 90 % of answers at ≥ CONFIDENT were right
(`cap` null then). A question the knowledge base holds word for word (an entry's own question, e.g.
one saved from a review) is EXACT_CONFIDENCE.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from . import words as english
from .retrieval import Reference, asks_the_same

MODEL_PATH = Path(__file__).with_name("decision_model.json")
# Confidence at or above this promises ≥ 90% right (the default auto-answer band,
# questions.auto_answer_confidence); `eval` checks the promise under cross-validation.
CONFIDENT = 0.8
EXACT_CONFIDENCE = 0.95
# For choosing sentences and the verbatim reuse of an entry (not for the decision).
VERBATIM_MATCH = 0.6
RELEVANT_MATCH = 0.35

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
        if len(word) > 5 and word.endswith("ies"):
            word = word[:-3] + "y"  # "vulnerabilities" is "vulnerability"
        for suffix in ("ing", "ed", "es", "s"):
            if len(word) > len(suffix) + 3 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
        found.add(word)
    return found


def same_question(question: str, reference: Reference) -> bool:
    """The entry was written for exactly this question (case, spacing and punctuation aside)."""
    return asks_the_same(question, reference.question)


def overlap(question: str, reference: Reference) -> float:
    """Share of the question's content words the entry mentions anywhere (unweighted)."""
    wanted = terms(question)
    if not wanted:
        return 0.0
    everything = terms(reference.question) | terms(reference.title) | terms(reference.answer)
    return len(wanted & everything) / len(wanted)


def sentence_overlap(question: str, reference: Reference) -> float:
    """Share of the question's content words said in the entry's own question or in one sentence
    of its answer, the best such: an entry that mentions a word in passing, one here and one
    there, scores low though its overall overlap is high."""
    wanted = terms(question)
    if not wanted:
        return 0.0
    pieces = [reference.question or "", reference.title or "", *split_sentences(reference.answer)]
    return max(len(wanted & terms(piece)) / len(wanted) for piece in pieces)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


def split_sentences(text: str | None) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split((text or "").strip()) if s.strip()]


# -- the decision --------------------------------------------------------------------------------

# Every feature the decision may use; the model file names the ones cross-validation kept.
FEATURES = ("score", "margin", "question_match", "coverage", "overlap", "unknown", "unknown_peak",
            "sentence")
# With dense retrieval: also the first reference's cosine similarity to the question, and how far
# it is above the next references' (the lexical margin says little once fusion re-orders them).
DENSE_FEATURES = (*FEATURES, "dense", "dense_margin")


def features(question: str, references: Sequence[Reference]) -> dict[str, float]:
    """What the decision looks at, each in [0, 1] (all 0 when nothing was retrieved); "dense"
    only when the references carry a dense similarity."""
    if not references:
        return dict.fromkeys(FEATURES, 0.0)
    best = references[0]
    second = references[1].score if len(references) > 1 else 0.0
    values = {
        "score": best.score,
        "margin": max(0.0, best.score - second),
        "question_match": best.question_match,
        "coverage": best.coverage,
        "overlap": overlap(question, best),
        "unknown": best.unknown,
        "unknown_peak": best.unknown_peak,
        "sentence": sentence_overlap(question, best),
    }
    if best.dense is not None:
        values["dense"] = best.dense
        others = [r.dense for r in references[1:] if r.dense is not None]
        values["dense_margin"] = max(0.0, best.dense - max(others, default=0.0))
    return values


@attrs.frozen(kw_only=True)
class Model:
    intercept: float
    coefficients: dict[str, float]
    threshold: float = 0.5
    # Confidence stays below this unless cross-validation earned ≥ CONFIDENT (None: no cap).
    cap: float | None = CONFIDENT - 0.01
    # Fitted on retrievals with dense fusion, entries found by meaning alone among them (None:
    # when it has a "dense" coefficient).
    dense: bool | None = None

    @property
    def judges_dense(self) -> bool:
        return self.dense if self.dense is not None else "dense" in self.coefficients

    def probability(self, values: dict[str, float]) -> float:
        z = self.intercept + sum(self.coefficients.get(k, 0.0) * v for k, v in values.items())
        return 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> Model:
        data = json.loads(path.read_text())
        return cls(intercept=data["intercept"], coefficients=data["coefficients"],
                   threshold=data.get("threshold", 0.5), cap=data.get("cap", CONFIDENT - 0.01),
                   dense=data.get("dense"))


MODEL = Model.load()
# The model fitted on retrievals with dense fusion (the default), used when the first reference
# carries a dense similarity; `MODEL` decides lexical retrievals (no pgvector, backend "none").
# Both are written by `make eval EVAL_ARGS="--fit --prune --write-model …"` with the matching
# embeddings backend (docs/answer-quality.md).
DENSE_MODEL_PATH = MODEL_PATH.with_name("decision_model_dense.json")
DENSE_MODEL = Model.load(DENSE_MODEL_PATH) if DENSE_MODEL_PATH.exists() else None


def model_for(references: Sequence[Reference]) -> Model:
    """The dense model when the first reference carries a dense similarity, else the lexical one."""
    if references and references[0].dense is not None and DENSE_MODEL is not None:
        return DENSE_MODEL
    return MODEL


@attrs.frozen(kw_only=True)
class Decision:
    sufficient: bool
    # In [0, 1]: the probability that the first reference answers the question, capped (Model.cap)
    # and, when the decision is "not covered", kept under the model's threshold.
    confidence: float
    probability: float  # that the first reference answers the question, uncapped
    exact: bool  # the first reference was written for exactly this question
    rationale: str


def _label(ref: Reference) -> str:
    name = f"“{ref.title}”" if ref.title else f"“{(ref.question or ref.answer)[:60]}”"
    external = f", external id {ref.external_id}" if ref.external_id else ""
    return f"{name} ({ref.kb_item_id}{external})"


def decide(question: str, references: Sequence[Reference], model: Model | None = None) -> Decision:
    """Whether `references[0]` answers `question`, and how sure that is."""
    if not references:
        return Decision(sufficient=False, confidence=0.0, probability=0.0, exact=False,
                        rationale="Not covered: retrieval found no knowledge-base entry sharing its terms.")
    best = references[0]
    if same_question(question, best):
        return Decision(sufficient=True, confidence=EXACT_CONFIDENCE, probability=1.0, exact=True,
                        rationale=f"The knowledge base holds this very question: {_label(best)}.")
    values = features(question, references)
    model = model or model_for(references)
    p = model.probability(values)
    # An entry found by meaning alone shares no term with the question (coverage 0; the unweighted
    # overlap may still count a word PostgreSQL drops, "each", "before"). A lexical model was
    # fitted on entries that share terms with their questions and has no say about it; a model
    # fitted on dense retrievals saw such entries.
    unmatched = not values["coverage"] and not model.judges_dense
    sufficient = p >= model.threshold and not unmatched
    confidence = p if sufficient else min(p, model.threshold - 0.01)
    if model.cap is not None:
        confidence = min(model.cap, confidence)
    confidence = round(confidence, 4)
    evidence = (f"best match {_label(best)}: score {best.score:.2f}, {best.coverage:.0%} of the "
                f"question's weighted terms, {best.question_match:.0%} in its own question, margin "
                f"{values['margin']:.2f} over the next; estimated {p:.0%} likely to answer it")
    rationale = (f"Covered: {evidence}." if sufficient
                 else f"Not covered: the nearest entry, {_label(best)}, shares no term with the "
                      "question." if unmatched
                 else f"Not covered: no entry matches the question well enough ({evidence}).")
    return Decision(sufficient=sufficient, confidence=confidence, probability=round(p, 4),
                    exact=False, rationale=rationale)


# -- matching for composition (which entries and sentences to use) -------------------------------


@attrs.frozen(kw_only=True)
class Match:
    reference: Reference
    score: float  # in [0, 1]: how well this entry speaks to the question
    missing: frozenset[str]  # question terms the entry does not mention


def match(question: str, reference: Reference) -> Match:
    wanted = terms(question)
    if not wanted:
        return Match(reference=reference, score=0.0, missing=frozenset())
    asked = terms(reference.question)
    everything = asked | terms(reference.title) | terms(reference.answer)
    by_question = len(wanted & asked) / len(wanted)
    anywhere = len(wanted & everything) / len(wanted)
    score = 0.75 * max(by_question, 0.8 * anywhere) + 0.25 * max(0.0, min(1.0, reference.score))
    return Match(reference=reference, score=round(score, 4), missing=frozenset(wanted - everything))


def same_subject(question: str, reference: Reference) -> bool:
    """The entry was written for this question in substance: its own question (or title) says
    most of the question's terms. Then its whole answer, and its own Yes/No, answer it."""
    if not reference.question and not reference.title:
        return False
    if same_question(question, reference):
        return True
    wanted = terms(question)
    asked = terms(reference.question) | terms(reference.title)
    return bool(wanted) and len(wanted & asked) / len(wanted) >= VERBATIM_MATCH


def similarity(question: str, text: str) -> float:
    """How much of the question a text says: the share of the question's content words it
    contains, each weighed by how rare the word is in English (words.factor), so that "patched"
    counts for more than "run"."""
    return _weighed(question)(text)


def _weighed(question: str) -> Callable[[str], float]:
    """`similarity` to this question, its words and their weights worked out once: an entry of
    thousands of sentences against a question of thousands of words was their product (36 s)."""
    wanted = terms(question)
    weight = {t: english.factor(t) for t in wanted}
    total = sum(weight.values())

    def of(text: str) -> float:
        if not wanted:
            return 0.0
        return sum(weight[t] for t in wanted & terms(text)) / total

    return of


def bearing_sentences(question: str, reference: Reference) -> list[tuple[float, int, str]]:
    """The sentences of the entry's answer that bear on the question (say any of its words):
    (similarity, position, sentence), the most similar first (the earlier on a tie)."""
    said = _weighed(question)
    ranked = [(said(sentence), position, sentence)
              for position, sentence in enumerate(split_sentences(reference.answer))]
    return sorted((r for r in ranked if r[0] > 0), key=lambda r: (-r[0], r[1]))


def bearing(question: str, reference: Reference) -> float:
    """How well the entry's best part, its own question or one sentence, says the question."""
    pieces = [reference.question or "", reference.title or "", *split_sentences(reference.answer)]
    said = _weighed(question)
    return max(said(piece) for piece in pieces)


def relevant(question: str, references: Sequence[Reference]) -> list[Match]:
    """The references that speak to the question, in retrieval order."""
    return [m for m in (match(question, r) for r in references) if m.score >= RELEVANT_MATCH]


# -- the answer's assessment ---------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Assessment:
    confidence: float
    rationale: str
    requires_attention: bool
    attention_points: tuple[str, ...]


def _led_by_yes_no(answer: str | None, drawn: Sequence[Reference]) -> bool:
    """The answer is one entry's whole answer led by that entry's own Yes/No."""
    if not answer or len(drawn) != 1 or drawn[0].yes_no is None:
        return False
    return answer == f"{'Yes' if drawn[0].yes_no else 'No'}. {drawn[0].answer}"


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
    attention_below: float = CONFIDENT,
) -> Assessment:
    """Confidence in [0, 1] (the decision's calibrated probability that the first reference
    answers the question), what it rests on, and what a person should check. An answer under
    `attention_below` (the auto-answer band, questions.auto_answer_confidence) requires attention."""
    if failure is not None:
        return Assessment(
            confidence=0.0,
            rationale="No answer: the answer engine failed, so there is nothing to be confident in.",
            requires_attention=True,
            attention_points=(f"The answer engine failed ({failure}); the credit was refunded. "
                              "Ask again later or answer by hand.", *engine_points),
        )
    decision = decide(question, references)
    if not sufficient_context:
        nearest = (f" The nearest entry is {_label(references[0])}." if references else "")
        points = [f"The knowledge base has no entry that answers this question.{nearest} "
                  "Answer it by hand, and consider adding the answer to the knowledge base."]
        # The probability that the nearest entry answers it; under the decision's threshold when
        # the engine refused what the decision would have accepted.
        confidence = (decision.confidence if not decision.sufficient
                      else min(decision.confidence, MODEL.threshold - 0.01))
        return Assessment(
            confidence=round(confidence, 4),
            rationale=decision.rationale if not decision.sufficient else (
                "Not covered: the answer engine found nothing in the references that answers it."),
            requires_attention=True,
            attention_points=(*points, *engine_points),
        )

    by_id = {ref.kb_item_id: ref for ref in references}
    drawn = [by_id[i] for i in used if i in by_id] or references[:1]
    points: list[str] = []
    # The decision is about the first reference; an answer from another one is less certain.
    agrees = decision.sufficient and bool(drawn) and drawn[0].kb_item_id == references[0].kb_item_id
    confidence = decision.confidence if agrees else min(decision.probability, 0.5)
    # The rationale says "verbatim" exactly when the answer is an entry's answer unchanged (the
    # pipeline's verbatim_answer flag).
    if verbatim:
        rationale = f"Verbatim reuse. {decision.rationale}"
    elif _led_by_yes_no(answer, drawn):
        rationale = f"The entry's whole answer, led by its own Yes/No. {decision.rationale}"
    else:
        rationale = (f"Composed from {len(drawn)} entr{'y' if len(drawn) == 1 else 'ies'}. "
                     f"{decision.rationale}")
        if len(drawn) > 1:
            points.append("The answer combines " + ", ".join(_label(r) for r in drawn)
                          + "; check that they agree and are equally current.")
    if drawn and not decision.exact:
        missing = match(question, drawn[0]).missing
        if missing:
            points.append("The question mentions " + ", ".join(f"“{t}”" for t in sorted(missing))
                          + f" which {_label(drawn[0])} does not address; confirm the answer covers it.")
        points.append(f"Check that {_label(drawn[0])} still reflects current practice.")
    confidence = round(max(0.0, min(1.0, confidence)), 4)
    return Assessment(
        confidence=confidence,
        rationale=rationale,
        requires_attention=confidence < attention_below or not answer,
        attention_points=(*points, *engine_points),
    )
