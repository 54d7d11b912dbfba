"""Retrieval: the knowledge-base entries that may answer a question, best first.

The interface (`find_references`, `Reference`) is what the pipeline and the engines rely on;
the ranking behind it can change.

Two stages, both driven from PostgreSQL's full-text data:
1. Candidates (SQL, GIN index): entries containing the question's *rarest* lexemes (per-account
   document frequencies in `knowledge_terms`) or a phrase of a vocabulary concept the question
   mentions (`knowledge_vocabulary`), capped, then cut to the best RERANK by weighted ts_rank.
   A retrieval never ranks every entry that shares a common word.
2. Ranking (Python, on the candidates' tsvectors): idf-weighted coverage of the question by the
   entry's own question/title (question-to-question) and by its answer, with concepts counted as
   terms, so "2FA" finds "multi-factor". Scores are in [0, 1].
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import asyncpg
import attrs

from . import db

# The candidate stage reads one heap page per candidate row; that, not ranking, is what costs
# (bench/retrieval.py). So the rows read are bounded, not the lexemes used.
CANDIDATE_BUDGET = 300  # sum of the document frequencies of the lexemes that choose candidates
CANDIDATE_LIMIT = 400  # most candidate rows read and ranked by ts_rank
RERANK = 80  # candidates re-ranked in Python
# How the ranking score is made of the features (weights sum to 1, so the score is in [0, 1]);
# chosen by measurement on the development set (docs/answer-quality.md).
WEIGHTS = {"question": 0.35, "coverage": 0.35, "answer": 0.30, "precision": 0.0}
CONCEPT_WEIGHT = 1.5  # a concept's weight relative to the question's mean lexeme idf


@attrs.frozen(kw_only=True)
class Reference:
    kb_item_id: str
    external_id: str | None
    title: str | None
    question: str | None
    answer: str
    source: str | None
    score: float  # in [0, 1]; higher is a better match
    # Share (0 to 1, idf-weighted) of the question's terms found in the entry's own question/title.
    question_match: float = 0.0
    # Share (0 to 1, idf-weighted) of the question's terms found anywhere in the entry.
    coverage: float = 0.0
    # The entry's own answer when it only pointed elsewhere ("Please see X") and `answer` is X's.
    pointer: str | None = None


# -- tsvector text as PostgreSQL prints it: 'lexeme':1A,4 'other':2C -------------------------

_POINTER = re.compile(
    r"^\s*(?:please\s+)?(?:see|refer\s+to|refer|as\s+per|per)\s+(?:answer\s+|question\s+|entry\s+)?"
    r"([A-Za-z0-9&][\w&.\-]*?)\.?\s*$",
    re.IGNORECASE,
)


def lexeme_weights(vector: str, lexeme: str) -> str:
    """The weights of a lexeme's positions in a tsvector's text ('lex':1A,4 …): one letter per
    position, A question, B title, C answer ("" when absent). A substring search, not a parse:
    only the question's few lexemes are looked up."""
    key = "'" + lexeme.replace("'", "''") + "'"
    start = vector.find(key + ":")
    while start > 0 and vector[start - 1] != " ":
        start = vector.find(key + ":", start + 1)
    if start < 0:
        return "" if vector.find(key) < 0 or not _bare(vector, key) else "D"
    end = vector.find(" ", start + len(key))
    positions = vector[start + len(key) + 1 : end if end >= 0 else None]
    return "".join(p[-1] if p[-1] in "ABC" else "D" for p in positions.split(","))


def _bare(vector: str, key: str) -> bool:
    """Whether the lexeme occurs without positions (stripped vectors): 'lex' then space or end."""
    index = vector.find(key)
    while index >= 0:
        after = index + len(key)
        if (index == 0 or vector[index - 1] == " ") and (after == len(vector) or vector[after] == " "):
            return True
        index = vector.find(key, index + 1)
    return False


def pointer_target(answer: str) -> str | None:
    """The id an answer only points to ("Please see CEK-13.1."), or None."""
    if len(answer) > 80:
        return None
    match = _POINTER.match(answer)
    return match.group(1) if match else None


def idf(df: int, items: int) -> float:
    """BM25's inverse document frequency; a lexeme no entry has weighs the most."""
    return math.log(1 + (items - df + 0.5) / (df + 0.5))


@attrs.frozen
class _Term:
    key: str  # a lexeme, or a concept's name
    weight: float
    is_concept: bool = False


def _choose_candidate_lexemes(terms: Sequence[tuple[str, int]], items: int) -> list[str]:
    """The rarest lexemes whose document frequencies sum to at most CANDIDATE_BUDGET (≥ 1);
    every lexeme when the whole knowledge base is within the candidate limit."""
    if items <= CANDIDATE_LIMIT:
        return [lexeme for lexeme, df in terms if df > 0]
    chosen, total = [], 0
    for lexeme, df in sorted((t for t in terms if t[1] > 0), key=lambda t: (t[1], t[0])):
        if chosen and total + df > CANDIDATE_BUDGET:
            break
        chosen.append(lexeme)
        total += df
    return chosen


def _field_share(weights: str, field: str) -> bool:
    return any(w in field for w in weights)


async def find_references(
    conn: asyncpg.Connection, account_id: str, text: str, limit: int = 5
) -> list[Reference]:
    rows = await conn.fetch(db.query("query_terms"), account_id, text)
    if not rows:
        return []
    items = rows[0]["items"]
    if items == 0:
        return []
    lexemes = [(row["lexeme"], row["df"]) for row in rows]
    concepts = await conn.fetch(db.query("query_concepts"), account_id, text)
    phrases = [(row["concept"], query) for row in concepts for query in row["phrase_queries"]]

    terms = [_Term(lexeme, idf(df, items)) for lexeme, df in lexemes]
    mean_idf = sum(t.weight for t in terms) / len(terms)
    terms += [_Term(row["concept"], CONCEPT_WEIGHT * mean_idf, True) for row in concepts]

    candidate_lexemes = _choose_candidate_lexemes(lexemes, items)
    ranking_lexemes = [lexeme for lexeme, df in lexemes if df > 0]
    if not candidate_lexemes and not phrases:
        return []
    candidates = await conn.fetch(
        db.query("knowledge_candidates"),
        account_id,
        candidate_lexemes,
        [query for _, query in phrases],
        ranking_lexemes,
        CANDIDATE_LIMIT,
        RERANK,
    )
    if not candidates:
        return []
    concept_hits = await _concept_hits(conn, account_id, phrases, [c["id"] for c in candidates])

    total = sum(t.weight for t in terms)
    scored = []
    for row in candidates:
        vector = row["vector"]
        hits = concept_hits.get(row["id"], set())
        in_question = in_answer = anywhere = 0.0
        matched_question_lexemes = 0
        for term in terms:
            if term.is_concept:
                weights = "AC" if term.key in hits else ""
            else:
                weights = lexeme_weights(vector, term.key)
            if _field_share(weights, "AB"):
                in_question += term.weight
                matched_question_lexemes += not term.is_concept
            if _field_share(weights, "CD"):
                in_answer += term.weight
            if weights:
                anywhere += term.weight
        question_lexemes = row["question_lexemes"]
        question_match = in_question / total
        coverage = anywhere / total
        # How much of the entry's own question the asked one accounts for: a long entry question
        # sharing two words is a weaker match than a short one sharing the same two.
        precision = matched_question_lexemes / question_lexemes if question_lexemes else 0.0
        score = (
            WEIGHTS["question"] * question_match
            + WEIGHTS["coverage"] * coverage
            + WEIGHTS["answer"] * in_answer / total
            + WEIGHTS["precision"] * precision
        )
        scored.append((score, question_match, coverage, row))
    scored.sort(key=lambda s: (-s[0], s[3]["id"]))
    top = scored[:limit]
    return await _resolve_pointers(
        conn,
        account_id,
        [
            Reference(
                kb_item_id=row["id"],
                external_id=row["external_id"],
                title=row["title"],
                question=row["question"],
                answer=row["answer"],
                source=row["source"],
                score=round(min(max(score, 0.0), 1.0), 4),
                question_match=round(question_match, 4),
                coverage=round(coverage, 4),
            )
            for score, question_match, coverage, row in top
        ],
    )


async def _concept_hits(
    conn: asyncpg.Connection,
    account_id: str,
    phrases: Sequence[tuple[str, str]],
    ids: Iterable[str],
) -> dict[str, set[str]]:
    """{entry id: the concepts (of the question's) whose phrases the entry contains}."""
    if not phrases:
        return {}
    rows = await conn.fetch(
        db.query("knowledge_concept_matches"), account_id, [q for _, q in phrases], list(ids)
    )
    return {
        row["id"]: {phrases[ordinal - 1][0] for ordinal in (row["matched"] or [])} for row in rows
    }


async def _resolve_pointers(
    conn: asyncpg.Connection, account_id: str, references: list[Reference]
) -> list[Reference]:
    """Replace "Please see X" answers by X's answer, keeping the pointing entry's identity."""
    targets = {ref.kb_item_id: pointer_target(ref.answer) for ref in references}
    wanted = sorted({t for t in targets.values() if t})
    if not wanted:
        return references
    rows = await conn.fetch(db.query("knowledge_item_by_external_id"), account_id, wanted)
    found = {row["external_id"]: row for row in rows}
    resolved = []
    for ref in references:
        target = found.get(targets[ref.kb_item_id] or "")
        if target is not None and target["id"] != ref.kb_item_id:
            ref = attrs.evolve(ref, answer=target["answer"], pointer=ref.answer)
        resolved.append(ref)
    return resolved
