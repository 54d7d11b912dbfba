"""How common a question's words are in English at large, to temper what one knowledge base says.

BM25 weighs a word by how rare it is among the account's entries. A few hundred entries estimate
that poorly for everyday words: "year", "primary" or "week" may occur in one entry by chance and
then outweigh the question's terms of art ("geographically", "24x7x365", "SAML"). So each of
the question's lexemes keeps its idf times a factor from the word's frequency in general English
(wordfreq's English list, the words used at least once per million): full weight up to that,
less the more common the word (docs/answer-quality.md, "Fourth round").
"""

from __future__ import annotations

import functools
import re

import snowballstemmer
from wordfreq import zipf_frequency

# Zipf frequency: log10 of uses per billion words. 3 is once per million words, the cut-off of
# wordfreq's small English list; 4 is ten per million ("incident"), 6 one per thousand ("year").
FULL_WEIGHT_ZIPF = 3.0
SLOPE = 0.5  # weight lost per Zipf unit above FULL_WEIGHT_ZIPF
FLOOR = 0.3  # the weight the commonest words keep

# PostgreSQL's 'english' text search configuration stems with this same Snowball stemmer, so
# the stems here are the lexemes retrieval gets from the database.
_stemmer = snowballstemmer.stemmer("english")
_WORD = re.compile(r"[a-z]+")


@functools.lru_cache(maxsize=65536)
def _word(word: str) -> tuple[str, float]:
    """(lexeme, factor) of one lower-case word."""
    zipf = zipf_frequency(word, "en", wordlist="small")
    factor = 1.0 if zipf <= FULL_WEIGHT_ZIPF else max(FLOOR, 1.0 - SLOPE * (zipf - FULL_WEIGHT_ZIPF))
    return _stemmer.stemWord(word), factor


def factors(text: str) -> dict[str, float]:
    """Each lexeme of `text` with its factor (FLOOR to 1); a lexeme not here keeps its whole
    weight (numbers, compounds such as 'two-factor', words English rarely uses). When two words
    stem alike, the rarer decides."""
    found: dict[str, float] = {}
    for word in _WORD.findall(text.lower()):
        lexeme, factor = _word(word)
        found[lexeme] = max(found.get(lexeme, 0.0), factor)
    return found
