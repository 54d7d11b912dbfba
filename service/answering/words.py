"""How common a question's words are in English at large, to temper what one knowledge base says.

BM25 weighs a word by how rare it is among the account's entries. A few hundred entries estimate
that poorly for everyday words: "year", "primary" or "week" may occur in one entry by chance and
then outweigh the question's terms of art ("geographically", "24x7x365", "SAML"). So each of
the question's lexemes keeps its idf times a factor from the word's frequency in general English:
full weight for words used less than once per million, less the more common the word
(docs/answer-quality.md, "Fourth round").

The frequencies are wordfreq's small English list (code Apache-2.0, data CC BY-SA 4.0, by Robyn
Speer and contributors), loaded once at import: 29,000 words, a few MB.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from wordfreq import get_frequency_dict

# Zipf frequency: log10 of uses per billion words. 3 is once per million words, the cut-off of
# the small list; 4 is ten per million ("audit"), 6 one per thousand ("year").
FULL_WEIGHT_ZIPF = 3.0
SLOPE = 0.5  # weight lost per Zipf unit above FULL_WEIGHT_ZIPF
FLOOR = 0.3  # the weight the commonest words keep


def _frequencies() -> dict[str, float]:
    """wordfreq's small English list (word -> share of all words), with the parts PostgreSQL
    makes of a word with an apostrophe ("aren't": "aren" and "t"; "O'Brien") at least as
    frequent as the whole."""
    frequencies = dict(get_frequency_dict("en", wordlist="small"))
    for word, frequency in [item for item in frequencies.items() if "'" in item[0]]:
        for part in word.split("'"):
            if part and frequencies.get(part, 0.0) < frequency:
                frequencies[part] = frequency
    return frequencies


_FREQUENCIES = _frequencies()


def factor(word: str) -> float:
    """FLOOR to 1: how much of its idf a word keeps (1 for a word the list lacks: a term of art,
    a rare acronym)."""
    word = word.lower()
    frequency = _FREQUENCIES.get(word)
    if frequency is None and "-" in word:
        # A hyphenated compound ("third-party"): its parts used together, as wordfreq estimates
        # a phrase (the harmonic sum of the parts' frequencies).
        parts = [_FREQUENCIES.get(part) for part in word.split("-")]
        frequency = 1 / sum(1 / f for f in parts) if all(parts) else None
    if not frequency:
        return 1.0
    zipf = math.log10(frequency) + 9
    return 1.0 if zipf <= FULL_WEIGHT_ZIPF else max(FLOOR, 1.0 - SLOPE * (zipf - FULL_WEIGHT_ZIPF))


def factors(words: Iterable[Sequence[str]]) -> dict[str, float]:
    """Each lexeme's factor, from the question's (word as written, lexeme) pairs as PostgreSQL's
    parser makes them (knowledge_retrieve's `words`). When several words make one lexeme
    ("incident", "incidents"), the rarer decides."""
    found: dict[str, float] = {}
    for word, lexeme in words:
        found[lexeme] = max(found.get(lexeme, 0.0), factor(word))
    return found
