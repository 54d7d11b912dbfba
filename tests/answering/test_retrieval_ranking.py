from __future__ import annotations

import attrs

from service.answering import decision as coverage
from service.answering import retrieval
from service.answering import words as english
from service.answering.decision import decide
from service.answering.retrieval import (
    Reference,
    escaped,
    field_frequencies,
    find_references,
    lexemes_of,
)
from service.domain.knowledge import import_csv

KB = (
    "id,question,answer\n"
    "IAM-1,Do you enforce multi-factor authentication for administrators?,Yes.\n"
    "BCR-1,Is the disaster recovery plan tested annually?,Yes; a tabletop exercise each year.\n"
    "CEK-1,Are encryption keys rotated?,Please see CEK-2.\n"
    "CEK-2,How are cryptographic keys managed?,Keys live in a KMS and rotate every 90 days.\n"
    "HRS-1,Do employees complete training?,Annual security awareness training covers phishing.\n"
)


async def _load(conn, account_id, text=KB):
    return await import_csv(conn, account_id, text)


async def test_find_references__vocabulary_maps_acronym_to_phrase(conn, admin):
    await _load(conn, admin.account_id)
    found = await find_references(conn, admin.account_id, "Is 2FA required for admin logins?")
    assert found[0].external_id == "IAM-1"


async def test_find_references__drp_acronym_finds_disaster_recovery(conn, admin):
    await _load(conn, admin.account_id)
    found = await find_references(conn, admin.account_id, "Is your DRP reviewed every year?")
    assert found[0].external_id == "BCR-1"


async def test_find_references__operator_vocabulary_extends_matching(conn, admin, make_account):
    await _load(conn, admin.account_id)
    question = "Do you run a human firewall programme?"
    before = await find_references(conn, admin.account_id, question)
    assert all(ref.external_id != "HRS-1" for ref in before)
    await conn.execute(
        "INSERT INTO knowledge_vocabulary (account_id, concept, phrase) VALUES "
        "($1, 'people', 'human firewall'), ($1, 'people', 'security awareness')",
        admin.account_id,
    )
    after = await find_references(conn, admin.account_id, question)
    assert after[0].external_id == "HRS-1"


async def test_find_references__question_words_outrank_answer_words(conn, admin):
    await _load(conn, admin.account_id, "id,question,answer\n"
                "A,Do you log administrator access?,Yes.\n"
                "B,Do you keep records?,We log administrator access and much else besides.\n")
    found = await find_references(conn, admin.account_id, "Is administrator access logged?")
    assert [ref.external_id for ref in found] == ["A", "B"]
    assert found[0].question_match > found[1].question_match


async def test_find_references__pointer_entry_carries_the_target_answer(conn, admin):
    await _load(conn, admin.account_id)
    found = await find_references(conn, admin.account_id, "Are encryption keys rotated?")
    assert found[0].external_id == "CEK-1"
    assert found[0].answer == "Keys live in a KMS and rotate every 90 days."
    assert found[0].pointer == "Please see CEK-2."


async def test_term_statistics__follow_inserts_updates_and_deletes(conn, admin):
    await _load(conn, admin.account_id, "id,question,answer\nX,Rotate keys?,Yes.\nY,Keys?,Yes.\n")

    async def df(lexeme):
        return await conn.fetchval(
            "SELECT df FROM knowledge_terms WHERE account_id = $1 AND lexeme = $2",
            admin.account_id, lexeme,
        )

    assert (await df("key"), await df("rotat")) == (2, 1)
    await _load(conn, admin.account_id, "id,question,answer\nX,Keys kept?,Yes.\n")
    assert (await df("key"), await df("rotat"), await df("kept")) == (2, 0, 1)
    await conn.execute("DELETE FROM knowledge_items WHERE external_id = 'Y'")
    assert await df("key") == 1
    assert await conn.fetchval(
        "SELECT items FROM knowledge_stats WHERE account_id = $1", admin.account_id
    ) == 1


async def test_candidates__rarest_lexemes_within_budget_choose_them(conn, admin, monkeypatch):
    # df: quartz 1, basalt 1, granite 5; budget 2 takes quartz and basalt, not granite.
    await _load(conn, admin.account_id, "id,question,answer\n"
                "R,quartz granite?,Yes.\nS,basalt granite?,Yes.\n"
                "C1,granite?,Yes.\nC2,granite?,Yes.\nC3,granite?,Yes.\n")
    monkeypatch.setattr(retrieval, "CANDIDATE_BUDGET", 2)
    monkeypatch.setattr(retrieval, "CANDIDATE_LIMIT", 3)  # fewer than the 5 entries

    async def candidates(question):
        rows = await conn.fetch("SELECT * FROM knowledge_retrieve($1, $2, 2, 3, 10, '{}')",
                                admin.account_id, question)
        return sorted(row["external_id"] for row in rows[1:])

    assert await candidates("quartz basalt granite") == ["R", "S"]
    # The rarest lexeme is used even when it alone exceeds the budget.
    assert len(await candidates("granite")) == 3  # capped at the candidate limit
    found = await find_references(conn, admin.account_id, "quartz basalt granite")
    assert {ref.external_id for ref in found} == {"R", "S"}


async def test_candidates__cut_to_rerank_by_ts_rank_only_when_there_are_more(conn, admin):
    # ts_rank orders the candidates only to cut them: with more than `rerank`, the best by
    # ts_rank stay (the entries saying "cobalt" in their question, weight A, over the one saying
    # it in its answer); with `rerank` or fewer, all of them, and ts_rank is not computed. A
    # ts_rank of a schema searched before pg_catalog counts its calls.
    await _load(conn, admin.account_id, "id,question,answer\n"
                "Q1,Is cobalt used?,Yes.\nQ2,Cobalt stored where?,Onsite.\n"
                "A1,Which metals?,Iron and cobalt.\n")
    await conn.execute("""
        CREATE SCHEMA counting;
        CREATE SEQUENCE counting.ranked;
        CREATE FUNCTION counting.ts_rank(real[], tsvector, tsquery) RETURNS real LANGUAGE sql AS
            'SELECT pg_catalog.ts_rank($1, $2, $3) + 0 * nextval(''counting.ranked'')';
        SET search_path = counting, pg_catalog, public""")

    async def candidates(rerank):
        before = await conn.fetchval("SELECT last_value + CASE WHEN is_called THEN 0 ELSE -1 END"
                                     " FROM counting.ranked")
        rows = await conn.fetch("SELECT * FROM knowledge_retrieve($1, 'cobalt', 300, 400, $2, '{}')",
                                admin.account_id, rerank)
        after = await conn.fetchval("SELECT last_value + CASE WHEN is_called THEN 0 ELSE -1 END"
                                    " FROM counting.ranked")
        return sorted(row["external_id"] for row in rows[1:]), after - before

    assert await candidates(2) == (["Q1", "Q2"], 3)  # each of the three ranked
    assert await candidates(3) == (["A1", "Q1", "Q2"], 0)
    assert await candidates(200) == (["A1", "Q1", "Q2"], 0)


async def test_knowledge_retrieve__first_row_describes_the_question(conn, admin):
    await _load(conn, admin.account_id)
    [first, *rest] = await conn.fetch(
        "SELECT * FROM knowledge_retrieve($1, $2, 300, 400, 200, '{}')",
        admin.account_id, "Is 2FA required for administrator logins?")
    assert first["id"] is None and first["items"] == 5
    assert dict(zip(first["lexemes"], first["dfs"], strict=True))["administr"] == 1
    assert "mfa" in first["concepts"] and "authentication" in first["concepts"]
    assert ["mfa", "2fa"] in first["covered"] and all(pair[1] != "administr" for pair in first["covered"])
    assert {concept for concept, _ in first["covered"]} <= set(first["concepts"])
    assert ["administrator", "administr"] in first["words"]
    assert all(word != "2FA" for word, _ in first["words"])  # letters and digits: not weighed
    iam = next(row for row in rest if row["external_id"] == "IAM-1")
    assert "mfa" in iam["matched"] and iam["question_lexemes"] > 0


async def test_find_references__an_acronym_the_vocabulary_knows_is_not_unknown(conn, admin):
    # No entry says "DRP", but the vocabulary maps it to disaster recovery, which BCR-1 is about.
    await _load(conn, admin.account_id)
    [drp, *_] = await find_references(conn, admin.account_id, "Is the DRP tested?")
    assert drp.external_id == "BCR-1" and drp.unknown == drp.unknown_peak == 0.0
    [fedramp, *_] = await find_references(conn, admin.account_id, "Is the DRP FedRAMP tested?")
    assert fedramp.unknown > 0  # "FedRAMP" is not known: no entry or phrase has it


async def test_find_references__slash_joined_words_are_words_and_links_stay_links(conn, admin):
    kb = (
        "id,question,answer\n"
        "BCR-3,Is there a plan?,Our Business Continuity/Disaster Recovery plan is tested.\n"
        "ISO-1,Are you certified?,We hold an ISO 27001 certification.\n"
        "LNK-1,Where are the terms?,See https://example.com/legal/terms.\n"
    )
    await _load(conn, admin.account_id, kb)
    [drp, *_] = await find_references(conn, admin.account_id, "Is the disaster recovery plan tested?")
    assert drp.external_id == "BCR-3"
    # "ISO/IEC 27001" is a vocabulary phrase (audit): its words are known through it.
    [iso, *_] = await find_references(conn, admin.account_id, "Are you ISO/IEC 27001 certified?")
    assert iso.external_id == "ISO-1" and iso.unknown == 0.0
    # A link is not the word "https" (an encryption-in-transit phrase).
    found = await find_references(conn, admin.account_id, "Is HTTPS enforced?")
    assert all(ref.external_id != "LNK-1" for ref in found)


async def test_find_references__an_acronym_of_a_concept_no_entry_matches_stays_unknown(conn, admin):
    # "NDA" is in the vocabulary (confidentiality agreements), but no entry here is about those.
    await _load(conn, admin.account_id)
    found = await find_references(conn, admin.account_id, "Do administrators sign an NDA?")
    assert found and found[0].unknown > 0.5


async def test_find_references__unknown_peak_is_the_missing_word_of_art_however_long_the_question(
    conn, admin
):
    await _load(conn, admin.account_id)
    question = ("Do you enforce multi-factor authentication for administrators, rotate the keys "
                "in the KMS and train employees against phishing to CMMC?")
    [first, *_] = await find_references(conn, admin.account_id, question)
    # "CMMC" is the question's one word no entry has, and its rarest: the share of the question's
    # weight it holds is small, its weight against the heaviest word's is all of it.
    assert first.unknown_peak == 1.0 and first.unknown < 0.3
    [known, *_] = await find_references(conn, admin.account_id, "Are the keys in the KMS rotated?")
    assert known.unknown == known.unknown_peak == 0.0
    features = coverage.features(question, [first])
    assert "unknown_peak" in coverage.FEATURES  # so that --fit fits it
    assert (features["unknown"], features["unknown_peak"]) == (first.unknown, first.unknown_peak)


async def test_vocabulary__geographically_dispersed_is_known_from_geographically_separate(conn, admin):
    kb = ("id,question,answer\n"
          "DCS-1,Are data centres physically secured?,Yes: badge access and CCTV.\n"
          "BCR-2,Where are backups kept?,In a second data centre in a geographically-separate "
          "region.\n"
          "CEK-2,How are cryptographic keys managed?,Keys live in a KMS and rotate every 90 days.\n")
    await _load(conn, admin.account_id, kb)
    # An operator's phrases for every account (the seeded vocabulary no longer has them).
    await conn.execute(
        "INSERT INTO knowledge_vocabulary (concept, phrase) VALUES ('high_availability', "
        "'geographically separate'), ('high_availability', 'geographically dispersed')")
    questions = ["Are your data centres geographically dispersed?",
                 # the parser also makes the hyphenated word a lexeme of its own
                 "Are your data centres geographically-dispersed?"]
    for question in questions:
        [found, *_] = await find_references(conn, admin.account_id, question)
        # "dispersed" is in no entry, but the question's phrase and the entry's are one concept.
        assert found.external_id == "BCR-2" and found.unknown == found.unknown_peak == 0.0, question
    # Without the entry's phrase no entry matches the question's concept, and the
    # question seems to ask about a word the knowledge base never uses, which the decision holds
    # against it.
    await conn.execute("DELETE FROM knowledge_vocabulary WHERE phrase = 'geographically separate'")
    for question in questions:
        [without, *_] = await find_references(conn, admin.account_id, question)
        assert without.unknown_peak == 1.0, question


async def test_find_references__words_said_together_beat_words_scattered(conn, admin):
    # As many words, the question's the same: BM25F alone scores them equal, only the order of
    # the words tells POL-2 apart.
    kb = ("id,question,answer\n"
          "POL-1,Which documents exist?,Information to auditors yearly; security reviewed; we hold "
          "policy.\n"
          "POL-2,Which documents exist?,We keep an information security policy reviewed yearly "
          "by auditors.\n")
    await _load(conn, admin.account_id, kb)
    found = await find_references(conn, admin.account_id, "Is there an information security policy?")
    assert [ref.external_id for ref in found] == ["POL-2", "POL-1"]
    assert found[0].score > found[1].score


def test_compounds_of__a_hyphenated_word_is_covered_when_its_parts_are():
    words = [("End-of-life", "end-of-lif"), ("End", "end"), ("life", "life"), ("lock-out", "lock-out"),
             ("lock", "lock")]  # "of" and "out" are stop words: no lexeme, no pair
    assert retrieval._compounds_of(words, {"end", "life"}) == {"end-of-lif"}
    assert retrieval._compounds_of(words, {"end", "lock"}) == {"lock-out"}
    assert retrieval._compounds_of(words, set()) == set()


def test_proximity__neighbours_count_by_inverse_square_distance():
    weights = [2.0, 0.5]
    adjacent = retrieval._proximity([(1, 0, "C"), (2, 1, "C")], weights)
    apart = retrieval._proximity([(1, 0, "C"), (4, 1, "C")], weights)
    assert adjacent > apart > 0
    # Not pairs: the same lexeme twice, two fields (the question's last word, the answer's first),
    # two lexemes at one position (PostgreSQL's cap).
    assert retrieval._proximity([(1, 0, "C"), (2, 0, "C")], weights) == 0.0
    assert retrieval._proximity([(4, 0, "A"), (5, 1, "C")], weights) == 0.0
    assert retrieval._proximity([(3, 0, "C"), (3, 1, "C")], weights) == 0.0
    assert retrieval._proximity([(5, 1, "C")], weights) == 0.0
    # Each lexeme's part is saturated and weighed by min(1, weight): below (1 + k1)·(1 + 0.5)
    # however often the two alternate, and above what one pair gives.
    alternating = [(n, n % 2, "C") for n in range(100)]
    bound = (1 + retrieval.BM25_K1) * (min(1, weights[0]) + min(1, weights[1]))
    assert adjacent < retrieval._proximity(alternating, weights) < bound


def test_field_frequencies__count_one_lexemes_positions_by_field():
    vector = "'key':1A,7C,9 'monkey':2A 'it''s':3B,4B 's':5C 'bare' 'end':12,14A"
    found = lexemes_of(vector)

    def term_frequencies(lexeme: str) -> tuple[int, int]:
        return field_frequencies(found.get(escaped(lexeme)))

    assert term_frequencies("key") == (1, 2)  # A question; C answer, no letter: D
    assert term_frequencies("it's") == (2, 0)
    assert term_frequencies("s") == (0, 1)  # not the end of 'it''s'
    assert term_frequencies("bare") == (0, 1)  # a stripped vector: once, not in a field
    assert term_frequencies("end") == (1, 1)  # the last lexeme
    assert term_frequencies("monk") == (0, 0) and term_frequencies("key'") == (0, 0)
    assert found["key"].split(",") == ["1A", "7C", "9"]
    assert found["bare"] == "" and "monk" not in found


def test_decide__nothing_found_is_not_sufficient():
    decision = decide("Anything?", [])
    assert not decision.sufficient and decision.rationale


def test_decide__an_entry_found_by_meaning_alone_is_not_covered_unless_a_dense_model_judges():
    # What retrieval returns for an entry only dense search found: no term shared, though the
    # crude word overlap counts "each" and "before" (PostgreSQL's stopwords, not ours).
    device = Reference(kb_item_id="kb_dev", external_id=None, title=None, question=None,
                       answer="Each device is sanitised before it is reassigned.", source=None,
                       score=0.0, coverage=0.0, dense=0.8)
    question = "Is each laptop wiped before reuse?"
    assert coverage.features(question, [device])["overlap"] > 0
    decision = decide(question, [device], coverage.MODEL)
    assert not decision.sufficient and "shares no term" in decision.rationale
    assert decision.probability == round(coverage.MODEL.probability(
        coverage.features(question, [device])), 4)  # the model's, for the answer's confidence
    dense = coverage.Model(intercept=-1.0, coefficients={"dense": 2.0})
    assert decide(question, [device], dense).sufficient  # a dense model decides for itself


async def test_decide__close_match_is_sufficient_unrelated_is_not(conn, admin):
    await _load(conn, admin.account_id)
    close = "Do you enforce multi-factor authentication for administrators?"
    refs = await find_references(conn, admin.account_id, close)
    assert decide(close, refs).sufficient
    far = "Do you hold FedRAMP High authorization for your payroll subsidiaries in Brazil?"
    refs = await find_references(conn, admin.account_id, far)
    decision = decide(far, refs)
    assert not decision.sufficient
    assert 0 <= decision.confidence < 0.8


async def test_decide__a_paraphrase_is_sufficient_below_the_confident_band(conn, admin):
    await _load(conn, admin.account_id)
    question = "Is 2FA enforced for administrator accounts?"
    refs = await find_references(conn, admin.account_id, question)
    decision = decide(question, refs)
    assert refs[0].external_id == "IAM-1" and decision.sufficient and not decision.exact
    assert decision.confidence < 0.8


async def test_decide__a_question_hinging_on_a_standard_the_base_never_mentions_is_less_likely(
    conn, admin
):
    await _load(conn, admin.account_id)
    question = "Is 2FA enforced for administrator accounts under CMMC?"
    refs = await find_references(conn, admin.account_id, question)
    assert refs[0].external_id == "IAM-1" and refs[0].unknown_peak == 1.0 and refs[0].unknown > 0
    # The share of the question the knowledge base never mentions lowers the probability (the
    # peak alone was worth one question under cross-validation, so the model no longer has it).
    plain = "Is 2FA enforced for administrator accounts?"
    without = decide(plain, await find_references(conn, admin.account_id, plain))
    hinging = decide(question, refs)
    assert hinging.probability < without.probability
    assert hinging.confidence < coverage.CONFIDENT


async def test_import_csv__merges_the_index_pending_list(conn, admin):
    async def pending_pages():  # merging reports the pages it moved out of the pending list
        return await conn.fetchval("SELECT gin_clean_pending_list('knowledge_items_search'::regclass)")

    await pending_pages()
    await conn.execute(
        "INSERT INTO knowledge_items (id, account_id, answer) VALUES ('kb_direct', $1, 'Yes.')",
        admin.account_id,
    )
    assert await pending_pages() > 0  # a plain insert leaves its lexemes pending
    await _load(conn, admin.account_id)
    assert await pending_pages() == 0  # an import leaves nothing for retrieval to scan
    assert "gin_pending_list_limit=256" in await conn.fetchval(
        "SELECT reloptions::text FROM pg_class WHERE relname = 'knowledge_items_search'")


async def test_vocabulary__access_questions_do_not_expand_to_accessibility(conn, admin):
    # 'accessibility' stems to 'access' in English, so the seeded phrase made every question about
    # access expand to VPAT/WCAG entries (migration 0015 removed it).
    await _load(conn, admin.account_id, "id,question,answer\n"
                "ACC-1,Do you publish a VPAT?,Yes; a WCAG 2.1 AA conformance report.\n"
                "IAM-2,Is access to production reviewed?,Quarterly by the system owners.\n")
    found = await find_references(conn, admin.account_id, "Who can access customer data?")
    assert [ref.external_id for ref in found] == ["IAM-2"]
    found = await find_references(conn, admin.account_id, "Do you follow WCAG?")
    assert found[0].external_id == "ACC-1"


async def test_vocabulary__soc_report_is_not_a_security_operations_center(conn, admin):
    await _load(conn, admin.account_id, "id,question,answer\n"
                "MON-1,Is the platform monitored around the clock?,Yes; alerts page the on-call.\n"
                "AUD-1,Do you have a SOC 2 Type II report?,Yes; available under NDA.\n")
    found = await find_references(conn, admin.account_id, "Can you share your latest SOC 2 report?")
    assert [ref.external_id for ref in found] == ["AUD-1"]


async def test_vocabulary__seeded_concepts_include_hardening(conn, admin):
    await _load(conn, admin.account_id, "id,question,answer\n"
                "CFG-1,Are servers hardened?,Images follow the CIS benchmarks.\n"
                "HRS-1,Do employees complete training?,Annual security awareness training.\n")
    found = await find_references(conn, admin.account_id, "Do you apply a baseline configuration?")
    assert found[0].external_id == "CFG-1"


async def test_find_references__everyday_words_weigh_less_than_terms_of_art(conn, admin):
    # "test", "every" and "week" are each as rare in this knowledge base as "failover", so by its
    # counts alone the entry matching three of them would come first. English uses them far more
    # often than the term of art the question is about.
    kb = (
        "id,question,answer\n"
        "OPS-1,Are backups tested every week?,Every week.\n"
        "BCR-2,Can service move between regions?,Yes: automatic failover to a second region within minutes.\n"
    )
    await _load(conn, admin.account_id, kb)
    found = await find_references(conn, admin.account_id, "Do you test failover every week?")
    assert [ref.external_id for ref in found] == ["BCR-2", "OPS-1"]


def test_english_factors__common_words_lose_weight_rare_ones_keep_it():
    words = [("Year", "year"), ("data", "data"), ("SAML", "saml"), ("audit", "audit"),
             ("geographically", "geograph"), ("incidents", "incid"), ("incident", "incid")]
    factors = english.factors(words)
    assert factors["year"] == factors["data"] == english.FLOOR  # among the commonest English words
    assert factors["saml"] == 1.0  # not in the general list at all
    assert english.FLOOR < factors["audit"] < factors["geograph"] < 1.0  # the rarer, the more weight
    assert factors["incid"] == english.factor("incidents") > english.factor("incident")  # rarer form
    # PostgreSQL's pieces of "aren't" and the parts of a compound are as everyday as the whole.
    assert english.factor("aren") == english.factor("third-party") == english.FLOOR


async def test_knowledge_retrieve__words_come_from_postgresql_parser(conn, admin):
    await _load(conn, admin.account_id)
    [first, *_] = await conn.fetch(
        "SELECT * FROM knowledge_retrieve($1, $2, 300, 400, 200, '{}')",
        admin.account_id, "Naïve third-party logins, e.g. 2FA, aren't used?")
    words = {tuple(pair) for pair in first["words"]}
    assert {("Naïve", "naïv"), ("third-party", "third-parti"), ("party", "parti"), ("e.g", "e.g"),
            ("aren", "aren"), ("logins", "login")} <= words
    assert not any(word == "2FA" for word, _ in words)  # letters and digits keep their weight


async def test_find_references__entries_that_tie_come_in_external_id_order_in_every_import(
    conn, admin, make_account
):
    # Internal ids are random: ordering ties by them made the first reference differ from one
    # import of the same knowledge base to the next.
    text = ("id,question,answer\n"
            "Z-9,Are backups encrypted?,No.\nA-1,Are backups encrypted?,No.\n"
            "M-5,Are backups encrypted?,No.\n")
    for _ in range(4):
        other = await make_account()
        await _load(conn, other.account_id, text)
        found = await find_references(conn, other.account_id, "Do you encrypt backups?")
        assert [ref.external_id for ref in found] == ["A-1", "M-5", "Z-9"]


def test_shared_ranks__equal_scores_share_the_best_rank():
    ranks = retrieval._shared_ranks({"a": 0.5, "b": 0.9, "c": 0.5, "d": 0.1, "e": 0.50000001})
    assert ranks == {"b": 1, "a": 2, "c": 2, "e": 2, "d": 5}


def test_fuse__tied_lexical_entries_get_the_same_lexical_share():
    rows = [(0.8, 0, 0, {"id": i, "external_id": e}) for i, e in (("x1", "B"), ("x2", "A"))]
    # Equal lexical scores: the dense similarity alone decides, whatever order they came in.
    for order in (rows, rows[::-1]):
        fused = retrieval._fuse(list(order), {"x1": 0.7, "x2": 0.6})
        assert [s[3]["external_id"] for s in fused] == ["B", "A"]


def test_bm25f__tallies_made_beforehand_score_exactly_as_made_in_it():
    # find_references tallies the lexical candidates while PostgreSQL finds the nearest entries;
    # BM25F must then score them exactly (unrounded) as when it tallies every candidate itself,
    # the joining entries' lengths counting in the mean.
    question = retrieval._question({
        "items": 40, "lexemes": ["backup", "encrypt", "region"], "dfs": [6, 9, 2],
        "words": [["backups", "backup"], ["encrypted", "encrypt"], ["region", "region"]],
        "concepts": ["backup", "encryption"], "covered": [],
    })
    rows = [
        {"id": "a", "external_id": "A", "vector": "'backup':1A,7C 'encrypt':3C,9C", "matched": ["backup"],
         "question_lexemes": 4, "answer_lexemes": 30},
        {"id": "b", "external_id": "B", "vector": "'region':12C", "matched": None,
         "question_lexemes": 9, "answer_lexemes": 80},
        {"id": "c", "external_id": "C", "vector": "'encrypt':2A 'region':3A", "matched": ["encryption"],
         "question_lexemes": 3, "answer_lexemes": 12},
        # joining entries (dense retrieval's), longer than the candidates
        {"id": "d", "external_id": "D", "vector": "'backup':40C", "matched": ["backup", "encryption"],
         "question_lexemes": 20, "answer_lexemes": 400},
        {"id": "e", "external_id": "E", "vector": "", "matched": None,
         "question_lexemes": 15, "answer_lexemes": 300},
    ]
    beforehand = {row["id"]: retrieval._tally(question, row) for row in rows[:3]}

    assert retrieval._bm25f(question, rows, beforehand) == retrieval._bm25f(question, rows, {})
    # and the joining entries move the candidates' scores (their lengths are in the mean)
    assert retrieval._bm25f(question, rows[:3], {})[0][0] != retrieval._bm25f(question, rows, {})[0][0]


async def test_find_references__the_entry_written_for_exactly_the_question_comes_first(conn, admin):
    """A rewording whose answer says the question's words more often scores above the entry
    written for the question itself (one a reviewer saved): that one is the answer to reuse."""
    await _load(conn, admin.account_id, "id,question,answer\n"
                "A,Do you encrypt data at rest?,\"Yes. All data at rest is encrypted with AES-256; "
                "data at rest in backups is encrypted too.\"\n"
                "B,Is data encrypted at rest?,Yes.\n"
                "C,Do you encrypt data in transit?,Yes; TLS 1.2 or later.\n")
    found = await find_references(conn, admin.account_id, "is DATA encrypted at rest")
    assert [ref.external_id for ref in found[:2]] == ["B", "A"]
    assert found[0].score < found[1].score  # first by the rule, not by its score
    decided = decide("is DATA encrypted at rest", found)
    assert decided.exact and decided.confidence == coverage.EXACT_CONFIDENCE
    # Any other wording is ranked by its scores as before.
    reworded = await find_references(conn, admin.account_id, "Is all data encrypted at rest?")
    assert reworded[0].external_id == "A"


def test_decide__two_questions_in_another_script_are_not_the_same_question():
    """Questions were compared by their a-z and 0-9 runs only: two different questions with none
    (Cyrillic, Greek, CJK) were "the same question", answered at the exact-match confidence."""
    entry = Reference(kb_item_id="kb_1", external_id="X-1", title=None,
                      question="Используете ли вы многофакторную аутентификацию?", answer="Да.",
                      source=None, score=0.5, question_match=0.5, coverage=0.5)
    assert not decide("Шифруете ли вы данные при хранении?", [entry]).exact
    assert decide("используете ли вы многофакторную аутентификацию", [entry]).exact
    assert not coverage.same_question("?!", attrs.evolve(entry, question="…"))


def test_decide__questions_that_differ_in_a_vowel_sign_or_tone_mark_are_not_the_same_question():
    """A combining mark (a Devanagari vowel sign, a Thai tone mark) is part of its word: read as
    a break between words and dropped, "what is your day like" and "what is your donation like"
    (दिन, दान) were the same question, answered at the exact-match confidence."""
    entry = Reference(kb_item_id="kb_1", external_id="X-1", title=None,
                      question="आपका दान कैसा है?", answer="…", source=None, score=0.5,
                      question_match=0.5, coverage=0.5)
    assert not decide("आपका दिन कैसा है?", [entry]).exact
    assert decide("आपका  दान कैसा है", [entry]).exact
    assert not retrieval.asks_the_same("ใช้ไม้หรือไม่", "ใช้ไม่หรือไม่")  # wood, or not
    # The same text composed or decomposed (a file saved on macOS) is the same question.
    assert retrieval.asks_the_same("Do you cache in a Café?", "do you cache in a cafe\u0301")
