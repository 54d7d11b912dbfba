"""Retrieval: the knowledge-base entries that may answer a question, best first.

The interface (`find_references`, `Reference`) is what the pipeline and the engines rely on;
the ranking behind it can change.

Two stages, both driven from PostgreSQL's full-text data:
1. Candidates (SQL, GIN index, one statement: `knowledge_retrieve`, sql/functions/, which also
   returns the question's term statistics and each candidate's concepts): entries containing the
   question's *rarest* lexemes (per-account document frequencies in `knowledge_terms`) or a
   phrase of a vocabulary concept the question mentions (`knowledge_vocabulary`), capped, then
   cut to the best RERANK by weighted ts_rank. A retrieval never ranks every entry that shares a
   common word. With dense retrieval a second statement (`knowledge_retrieve_nearest`, once the
   question's vector is there) adds the DENSE_NEAREST entries nearest in meaning and every
   candidate's similarity.
2. Ranking (Python, on the candidates' tsvectors): BM25F over two fields, the entry's own
   question/title (question-to-question) and its answer, with the standard k1 and b, and each
   vocabulary concept the question mentions counted as one more term, so "2FA" finds
   "multi-factor". Each lexeme's idf is tempered by how common the word is in English at large
   (service/english.py). The best PROXIMITY_RERANK by BM25F also score for saying the
   question's words close together (term proximity). Divided by the most a perfect entry could
   score, so scores are in [0, 1].
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import unicodedata
from collections.abc import Sequence

import asyncpg
import attrs

from .. import db
from ..answering import embeddings
from ..answering import words as english
from .embeddings import Embedder

# The candidate stage reads one heap page per candidate row; that, not ranking, is what costs
# (bench/retrieval.py). So the rows read are bounded, not the lexemes used.
CANDIDATE_BUDGET = 300  # sum of the document frequencies of the lexemes that choose candidates
CANDIDATE_LIMIT = 400  # most candidate rows read (ranked by ts_rank when more than RERANK)
RERANK = 200  # candidates re-ranked in Python (a cut to 80 by ts_rank lost right entries)
# BM25's usual constants, not tuned to any data set: term-frequency saturation and length
# normalisation. Both fields count the same (docs/answer-quality.md: weighting the answer as much
# as the question beat every lighter answer weight).
BM25_K1 = 1.2
BM25_B = 0.75
CONCEPT_WEIGHT = 1.5  # a concept's weight relative to the question's mean lexeme idf
# Dense retrieval (only with an embedding backend): the entries nearest in meaning that join the
# lexical candidates, and reciprocal-rank fusion's constant (60, the usual) and the lexical
# ranking's weight in it relative to the dense one's (docs/answer-quality.md).
DENSE_NEAREST = 50
RRF_K = 60
LEXICAL_WEIGHT = 1.5
# A concept found in an entry counts like a lexeme found once in a field of average length.
CONCEPT_TF = 1 / (1 + BM25_K1)
# The term-proximity score's weight against BM25F's (`_proximity`): every weight from 0.1 to 0.3
# gave the same first references or better on the development set, and one to two more right
# entries in the first five (docs/answer-quality.md, "Fifth round"). The published form adds it
# unweighted to a BM25 whose terms carry (k1 + 1), about 0.45 on this scale.
PROXIMITY_WEIGHT = 0.25
PROXIMITY_RERANK = 30  # the best candidates by BM25F whose proximity is computed


@attrs.frozen(kw_only=True)
class Reference:
    kb_item_id: str
    external_id: str | None
    title: str | None
    question: str | None
    answer: str
    source: str | None
    score: float  # in [0, 1]; the lexical match (BM25F, and proximity for the best), higher is better
    # Share (0 to 1, idf-weighted) of the question's terms found in the entry's own question/title.
    question_match: float = 0.0
    # Share (0 to 1, idf-weighted) of the question's terms found anywhere in the entry.
    coverage: float = 0.0
    # The entry's own answer when it only pointed elsewhere ("Please see X") and `answer` is X's.
    pointer: str | None = None
    # Cosine similarity of the entry's embedding to the question's (None: no embedding backend,
    # or the entry is not embedded yet).
    dense: float | None = None
    # The entry's own Yes (True) or No (False), when its questionnaire gave one.
    yes_no: bool | None = None
    # Share (0 to 1, idf-weighted) of the question's lexemes that no entry of the account contains
    # and no vocabulary phrase of the question accounts for: a question about something the
    # knowledge base never mentions (a property of the question, the same on every reference).
    unknown: float = 0.0
    # The heaviest of those lexemes relative to the question's heaviest (0 to 1): 1 when the most
    # specific word of the question ("CMMC", "FERPA") is one the knowledge base never uses, however
    # long the question around it (the share above dilutes it). Also a property of the question.
    unknown_peak: float = 0.0
    # Library care (service/answering/staleness.py): the entry's version when it was retrieved
    # (a question keeps pointing at what it used), and its review date when that had passed
    # (ISO date). Both are read with the candidates (knowledge_retrieve).
    kb_version: int | None = None
    stale_since: str | None = None


# -- tsvector text as PostgreSQL prints it: 'lexeme':1A,4 'other':2C -------------------------

_POINTER = re.compile(
    r"^\s*(?:please\s+)?(?:see|refer\s+to|refer|as\s+per|per)\s+(?:answer\s+|question\s+|entry\s+)?"
    r"([A-Za-z0-9&][\w&.\-]*?)\.?\s*$",
    re.IGNORECASE,
)


# A lexeme of a tsvector's text and its positions: 'lex':1A,4 or 'lex' alone (a stripped vector).
# Inside the quotes a quote is doubled (and a backslash).
_LEXEME = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-C,]+))?")


def lexemes_of(vector: str) -> dict[str, str]:
    """A tsvector's text as {lexeme as written between the quotes (see `escaped`): its positions
    text}: "1A,4", the letter the weight (A question, B title, C answer, none D); "" for a lexeme
    without positions (a stripped vector)."""
    return dict(_LEXEME.findall(vector))


def escaped(lexeme: str) -> str:
    """A lexeme as a tsvector's text writes it between its quotes."""
    return lexeme.replace("\\", "\\\\").replace("'", "''")


def field_frequencies(positions: str | None) -> tuple[int, int]:
    """How often a lexeme occurs in the entry's question or title (weights A, B) and in the rest
    (C, D), from its positions text (`lexemes_of`; None: absent): counted on the text, each
    position being digits and at most one weight letter. Without positions it counts once in the
    rest."""
    if positions is None:
        return 0, 0
    if not positions:
        return 0, 1
    in_question = positions.count("A") + positions.count("B")
    return in_question, positions.count(",") + 1 - in_question


def pointer_target(answer: str) -> str | None:
    """The id an answer only points to ("Please see CEK-13.1."), or None."""
    if len(answer) > 80:
        return None
    match = _POINTER.match(answer)
    return match.group(1) if match else None


_ASCII_WORD = re.compile(r"[a-z0-9]+")


def normalized(text: str | None) -> str:
    """A question's words (its runs of letters, combining marks and digits), case, spacing,
    punctuation and Unicode composition aside. A mark is part of its word: `[^\\W_]` took a
    Devanagari vowel sign or a Thai tone mark for a break and dropped it, so दिन and दान (day,
    donation) were one word."""
    folded = unicodedata.normalize("NFC", (text or "").casefold())
    if folded.isascii():  # most questions: at a regular expression's speed
        return " ".join(_ASCII_WORD.findall(folded))
    return " ".join("".join(
        char if unicodedata.category(char)[0] in "LMN" else " " for char in folded).split())


def asks_the_same(text: str, entry_question: str | None) -> bool:
    """An entry written for exactly the question `text` (case, spacing and punctuation aside;
    a question of no words is no question)."""
    wanted = normalized(text)
    return bool(wanted) and wanted == normalized(entry_question)


def idf(df: int, items: int) -> float:
    """BM25's inverse document frequency; a lexeme no entry has weighs the most."""
    return math.log(1 + (items - df + 0.5) / (df + 0.5))


@attrs.frozen
class _Term:
    key: str  # a lexeme, or a concept's name
    weight: float
    is_concept: bool = False


async def find_references(
    conn: asyncpg.Connection,
    account_id: str,
    text: str,
    limit: int = 5,
    embedder: Embedder | None = None,
) -> list[Reference]:
    """The entries that may answer `text`, best first. With an `embedder`, the DENSE_NEAREST
    entries nearest in meaning join the lexical candidates and the order is the reciprocal-rank
    fusion of the lexical (BM25F) and the dense ranking; without one, the lexical order."""
    if embedder is None:
        rows = await _retrieve(conn, account_id, text)
        return await _rank(conn, account_id, text, rows, limit, {}, _question(rows[0]))
    # The lexical statement runs while the question is embedded (in the backend's thread, or
    # remotely): a retrieval waits for the longer of the two. No transaction waits on the backend.
    embedding = asyncio.ensure_future(embeddings.embed_question(embedder, text))
    try:
        rows = await _retrieve(conn, account_id, text)
    except BaseException:
        embedding.cancel()
        raise
    question_vector = await embedding
    question = _question(rows[0])
    if question_vector is None or question is None:
        return await _rank(conn, account_id, text, rows, limit, {}, question)
    # sql/functions/knowledge_retrieve_nearest.sql: the nearest entries that are not candidates
    # yet join them, and every one has its similarity, which the dense ranking orders. While
    # PostgreSQL finds them, the lexical candidates are tallied (`_tally`): a retrieval waits for
    # the longer of the two, not for both.
    finding = asyncio.ensure_future(conn.fetch(
        db.query("knowledge_retrieve_nearest"),
        account_id, embedder.model, embeddings.vector_literal(question_vector), len(question_vector),
        DENSE_NEAREST, 2 * DENSE_NEAREST, [row["id"] for row in rows[1:]], question.row["lexemes"],
        question.row["concepts"],
    ))
    try:
        # The task sends the statement. (With no statement cache, as behind PgBouncer, only its
        # Parse goes out now and the rest once awaited: nothing overlaps, nothing is lost.)
        await asyncio.sleep(0)
        # By id: a joining entry is never a lexical candidate (the statement leaves those out).
        tallies = {row["id"]: _tally(question, row) for row in rows[1:]}
        nearest = await finding
    except BaseException:
        finding.cancel()
        # asyncpg gives the connection back only once the cancelled task has run; until then the
        # caller's next statement (its ROLLBACK) would fail with "another operation is in
        # progress" and hide this error.
        await asyncio.gather(finding, return_exceptions=True)
        raise
    dense = {row["id"]: row["similarity"] for row in nearest if row["similarity"] is not None}
    return await _rank(conn, account_id, text, [*rows, *(row for row in nearest if row["joins"])],
                       limit, dense, question, tallies)


async def _retrieve(conn: asyncpg.Connection, account_id: str, text: str) -> list[asyncpg.Record]:
    """knowledge_retrieve's rows: the question's (term statistics, concepts), then candidates.
    (Its last argument, entries to add, is for processes of the previous version during a rolling
    upgrade: their knowledge_retrieve_dense calls it so.)"""
    return await conn.fetch(
        db.query("knowledge_retrieve"),
        account_id, text, CANDIDATE_BUDGET, CANDIDATE_LIMIT, RERANK, [],
    )


@attrs.frozen
class _Question:
    """What the ranking reads of the question (knowledge_retrieve's first row), worked out once."""

    row: asyncpg.Record
    terms: list[_Term]  # its lexemes (in knowledge_retrieve's order), then its concepts
    lexical: list[tuple[str, float]]  # each lexeme as a tsvector's text writes it, its weight
    concepts: list[tuple[str, float]]  # each concept's name, its weight


def _question(row: asyncpg.Record) -> _Question | None:
    """None when there is nothing to rank by: no entries, or no lexemes in the question."""
    items, lexemes = row["items"], row["lexemes"]
    if not items or not lexemes:
        return None
    common = english.factors(row["words"])
    terms = [
        _Term(lexeme, idf(df, items) * common.get(lexeme, 1.0))
        for lexeme, df in zip(lexemes, row["dfs"], strict=True)
    ]
    mean_idf = sum(t.weight for t in terms) / len(terms)
    terms += [_Term(concept, CONCEPT_WEIGHT * mean_idf, True) for concept in row["concepts"]]
    return _Question(
        row=row,
        terms=terms,
        # Per query, not per candidate: each lexeme as it is written in a tsvector's text.
        lexical=[(escaped(t.key), t.weight) for t in terms if not t.is_concept],
        concepts=[(t.key, t.weight) for t in terms if t.is_concept],
    )


async def _rank(
    conn: asyncpg.Connection,
    account_id: str,
    text: str,
    rows: Sequence[asyncpg.Record],
    limit: int,
    dense: dict[str, float],
    question: _Question | None,
    tallies: dict[str, _Tally] | None = None,
) -> list[Reference]:
    """The best `limit` of the candidates `rows[1:]` for the question `text` (`question`:
    `_question` of `rows[0]`; None: nothing to rank by); `tallies` of some candidates when they
    were made already."""
    candidates = rows[1:]
    if question is None or not candidates:
        return []
    asked = question.row
    lexical = question.terms[: len(asked["lexemes"])]
    # A lexeme of a vocabulary phrase ("BCP") is known through its concept when an entry matches
    # that concept, though no entry has the lexeme itself.
    matched = {concept for candidate in candidates for concept in candidate["matched"] or ()}
    covered = {lexeme for concept, lexeme in asked["covered"] if concept in matched}
    covered |= _compounds_of(asked["words"], covered)
    missing = [
        t.weight for t, df in zip(lexical, asked["dfs"], strict=True) if df == 0 and t.key not in covered
    ]
    unknown = sum(missing) / sum(t.weight for t in lexical)
    unknown_peak = max(missing, default=0.0) / max(t.weight for t in lexical)

    scored = _bm25f(question, candidates, tallies or {})
    scored.sort(key=lambda s: (-s[0], *_tie(s[3])))
    if dense:
        scored = _fuse(scored, dense)
    _exact_first(text, scored)
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
                dense=round(dense[row["id"]], 4) if row["id"] in dense else None,
                yes_no=row["yes_no"],
                unknown=round(unknown, 4),
                unknown_peak=round(unknown_peak, 4),
                kb_version=row["version"],
                stale_since=row["review_by"].isoformat() if row["stale"] else None,
            )
            for score, question_match, coverage, row in top
        ],
    )


def _exact_first(text: str, scored: list[_Scored]) -> None:
    """An entry written for exactly this question (one a reviewer approved and saved, an imported
    questionnaire's own question) goes first, wherever the scores put it: a rewording of it that
    says more of the knowledge base's frequent words can score above it, and a reviewer's answer
    to this very question is the one to reuse. Only candidates whose own question holds all the
    question's weighted terms can be one, so few are compared."""
    for position, candidate in enumerate(scored):
        if candidate[1] >= 0.999 and asks_the_same(text, candidate[3]["question"]):
            if position:
                scored.insert(0, scored.pop(position))
            return


def _compounds_of(words: Sequence[Sequence[str]], covered: set[str]) -> set[str]:
    """The lexemes of the question's hyphenated words whose parts are all in `covered`: the parser
    makes "geographically-dispersed" a lexeme of its own besides its parts', and no vocabulary
    phrase has that one. (A part without a lexeme, a stop word like "of", is no part.)"""
    lexemes: dict[str, set[str]] = {}
    for word, lexeme in words:
        lexemes.setdefault(word.lower(), set()).add(lexeme)
    found = set()
    for word, lexeme in words:
        if "-" not in word:
            continue
        parts = [lexemes[part] for part in word.lower().split("-") if part in lexemes]
        if parts and all(part & covered for part in parts):
            found.add(lexeme)
    return found


_Scored = tuple[float, float, float, asyncpg.Record]
# A candidate's part of BM25F that the other candidates do not change (all but the fields' length
# normalisation, by their mean lengths): the weight and field frequencies of each question lexeme
# it has, each concept's share, the weight found in its question and anywhere, and its lexemes.
_Tally = tuple[list[tuple[float, int, int]], list[float], float, float, dict[str, str]]


def _tally(question: _Question, row: asyncpg.Record) -> _Tally:
    """The candidate `row`'s part of BM25F that the other candidates do not change (`_Tally`)."""
    # The candidate's vector holds the question's lexemes only (knowledge_retrieve): a few.
    found = lexemes_of(row["vector"])
    fields: list[tuple[float, int, int]] = []
    concepts: list[float] = []
    in_question = anywhere = 0.0
    for key, weight in question.lexical:
        positions = found.get(key)
        if positions is None:
            continue
        tf_question, tf_answer = field_frequencies(positions)
        fields.append((weight, tf_question, tf_answer))
        anywhere += weight
        if tf_question:
            in_question += weight
    hits = row["matched"]
    if hits:
        for concept, weight in question.concepts:
            if concept in hits:  # counted as found once in each field
                concepts.append(weight * 2 * CONCEPT_TF)
                in_question += weight
                anywhere += weight
    return fields, concepts, in_question, anywhere, found


def _bm25f(
    question: _Question, candidates: Sequence[asyncpg.Record], tallies: dict[str, _Tally]
) -> list[_Scored]:
    """(score in [0, 1], question_match, coverage, row) of each candidate; `tallies` of some of
    them, by id, if already made."""
    total = sum(t.weight for t in question.terms)
    mean_question = sum(row["question_lexemes"] for row in candidates) / len(candidates) or 1.0
    mean_answer = sum(row["answer_lexemes"] for row in candidates) / len(candidates) or 1.0
    lexical = question.lexical
    weights_by_index = [weight for _, weight in lexical]
    # Each field's saturation term is < 1, so 2·total bounds the BM25F sum; each lexeme's
    # proximity term is below min(1, weight)·(k1 + 1).
    bound = 2 * total + PROXIMITY_WEIGHT * (BM25_K1 + 1) * sum(min(1.0, w) for w in weights_by_index)
    scored: list[list] = []
    for row in candidates:
        tally = tallies.get(row["id"])
        fields, concepts, in_question, anywhere, found = tally if tally is not None else _tally(question, row)
        saturation_question = BM25_K1 * (1 - BM25_B + BM25_B * row["question_lexemes"] / mean_question)
        saturation_answer = BM25_K1 * (1 - BM25_B + BM25_B * row["answer_lexemes"] / mean_answer)
        bm25 = 0.0
        for weight, tf_question, tf_answer in fields:
            bm25 += weight * (
                tf_question / (tf_question + saturation_question)
                + tf_answer / (tf_answer + saturation_answer)
            )
        for share in concepts:
            bm25 += share
        scored.append([bm25, in_question, anywhere, row, found])
    # Proximity, the costly part (positions parsed and sorted), re-orders the best by BM25F.
    for best in sorted(scored, key=lambda s: (-s[0], *_tie(s[3])))[:PROXIMITY_RERANK]:
        found = best[4]
        occurrences = [
            (int(p.rstrip("ABC")), index, p[-1] if p[-1] in "ABC" else "D")
            for index, (key, _) in enumerate(lexical) if found.get(key)
            for p in found[key].split(",")
        ]
        best[0] += PROXIMITY_WEIGHT * _proximity(occurrences, weights_by_index)
    return [(bm25 / bound, in_question / total, anywhere / total, row)
            for bm25, in_question, anywhere, row, _ in scored]


def _proximity(occurrences: list[tuple[int, int, str]], weights: Sequence[float]) -> float:
    """Büttcher, Clarke and Lushman's term proximity (SIGIR 2006), over an entry's occurrences
    (position, lexeme, field letter) of the question's lexemes: walking them in order, two
    neighbours that are different lexemes of one field at distance d each add the other's
    weight / d² to their accumulator, which is then saturated like a term frequency and weighed by
    min(1, weight). An entry that says the question's words together ("information security
    policy") beats one that scatters them. (The fields' vectors are concatenated, so the last word
    of the question and the first of the answer have neighbouring positions: not a pair.)"""
    if len(occurrences) < 2:
        return 0.0
    occurrences.sort()
    accumulated: dict[int, float] = {}
    for (first, a, field), (second, b, other_field) in itertools.pairwise(occurrences):
        # The same lexeme again; another field; one position (PostgreSQL caps them at 16383).
        if a == b or field != other_field or first == second:
            continue
        squared = (second - first) ** 2
        accumulated[a] = accumulated.get(a, 0.0) + weights[b] / squared
        accumulated[b] = accumulated.get(b, 0.0) + weights[a] / squared
    return sum(
        min(1.0, weights[i]) * acc * (BM25_K1 + 1) / (acc + BM25_K1) for i, acc in accumulated.items()
    )


def _fuse(lexical: list[_Scored], dense: dict[str, float]) -> list[_Scored]:
    """Reciprocal-rank fusion: each entry scores 1/(RRF_K + rank) in the lexical order (given)
    and in the dense order (similarity, highest first); entries are re-ordered by the sum.

    Entries that score the same share a rank (the best of theirs): many entries of a knowledge
    base tie (the same short answer, "No."), and ranking them one after another by their ids made
    the fused order, and so the first reference, depend on ids that differ from one import of the
    same knowledge base to the next."""
    lexical_rank = _shared_ranks({s[3]["id"]: s[0] for s in lexical if s[0] > 0})
    dense_rank = _shared_ranks(dense)
    # An entry only dense retrieval found shares no term: it has no lexical rank at all.
    fused = {
        item_id: (LEXICAL_WEIGHT / (RRF_K + lexical_rank[item_id]) if item_id in lexical_rank else 0.0)
        + (1 / (RRF_K + dense_rank[item_id]) if item_id in dense_rank else 0.0)
        for item_id in (s[3]["id"] for s in lexical)
    }
    return sorted(lexical, key=lambda s: (-fused[s[3]["id"]], -s[0], *_tie(s[3])))


def _tie(row: asyncpg.Record) -> tuple[str, str]:
    """The order of entries that score the same: by their external id (the customer's, the same
    in every import of a knowledge base; the internal id is random), then the internal id."""
    return (row["external_id"] or "", row["id"])


def _shared_ranks(scores: dict[str, float]) -> dict[str, int]:
    """Each id's rank by score, highest first; equal scores (to 6 decimals, past the float noise
    of one vector computed in two batches) share the best rank of theirs ("1, 2, 2, 4")."""
    ranks: dict[str, int] = {}
    previous = None
    for position, item_id in enumerate(sorted(scores, key=lambda i: -scores[i]), 1):
        value = round(scores[item_id], 6)
        if value != previous:
            rank, previous = position, value
        ranks[item_id] = rank
    return ranks


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
