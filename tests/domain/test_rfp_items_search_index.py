"""An RFP's item search through rfp_items_search_trgm (migration 0044): the statements that match
`question ILIKE p OR answer ILIKE p` (the API's list, the RFP page's list and its "Approve all"
band) find the same items through the index as without it, and are planned to use it."""

from __future__ import annotations

import json

from service import db
from service.domain import rfps
from service.domain.rfps import BLANK, like_pattern

# Question and answer of each item of the searched RFP, by position.
ITEMS = [
    ("Do you encrypt backups?", None),
    ("Key storage", "ENCRYPTED in an HSM."),
    ("École et café", "Répondu : naïve CAFÉ, Ærø"),
    ("Is 100% of traffic logged?", "Yes, 100 percent of it"),
    ("snake_case names", "a_b and a\\b paths"),
    ("Straße", "STRASSE"),
    ("Blank answer", ""),
    ("zz top", "ab cd"),
    ("日本語の質問", "回答です"),
    ("Separator" + chr(31) + "inside", "plain"),
]
TERMS = ["encrypt", "ENCRYPTED", "hsm.", "café", "CAFÉ", "école", "ÉCOLE", "naïve", "ærø", "100%", "0% o",
         "snake_case", "a_b", "a\\b", "_", "%", "\\", "ab", "b c", "straße", "strasse", "日本語", "回答",
         "zz", "q", "r" + chr(31) + "i", "backups?", "no such term", " "]


def _index_names(plan: dict) -> set[str]:
    names = {plan["Index Name"]} if "Index Name" in plan else set()
    for child in plan.get("Plans", []):
        names |= _index_names(child)
    return names


def _index_conditions(plan: dict) -> str:
    """The plan's index conditions, one a line."""
    found = [plan["Index Cond"]] if "Index Cond" in plan else []
    return "\n".join(found + [_index_conditions(child) for child in plan.get("Plans", [])])


async def search(conn, rfp_id: str, pattern: str, through_index: bool) -> tuple[list[str], int, set[str]]:
    """search_rfp_items_page's ids and total for `pattern`, and the indexes its plan used: as
    the service plans it, or with the trigram index dropped (the statement as it ran before
    0044; the DROP is rolled back)."""
    args = [rfp_id, 100, 0, pattern, False, None]
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(db.query("plan_each_search"))
        if not through_index:
            await conn.execute("DROP INDEX rfp_items_search_trgm")
        plan = json.loads(await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + db.query("search_rfp_items_page"), *args))
        rows = await conn.fetch(db.query("search_rfp_items_page"), *args)
    finally:
        await transaction.rollback()
    ids = [row["id"] for row in rows if row["id"] is not None]
    used = _index_names(plan[0]["Plan"])
    if through_index and rfps.search_term_problem(pattern.strip("%")) is None:
        # A term with a trigram is matched in the index, not only fetched there by rfp_id.
        assert "rfp_items_search_trgm" in used and "~~*" in _index_conditions(plan[0]["Plan"]), plan
    return ids, rows[0]["total"], used


async def test_item_search__the_index_finds_what_the_scan_found(conn, admin, make_account, make_rfp):
    rfp_id, beside = await make_rfp(admin, "Searched"), await make_rfp(admin, "Beside")
    other = await make_account()
    theirs = await make_rfp(other, "Theirs")
    rows = [(f"item_s{n}", rfp_id, q, a, n) for n, (q, a) in enumerate(ITEMS, 1)]
    # The same texts in another RFP of the account and in another account's: never found.
    rows += [(f"item_b{n}", beside, q, a, n) for n, (q, a) in enumerate(ITEMS, 1)]
    rows += [(f"item_t{n}", theirs, q, a, n) for n, (q, a) in enumerate(ITEMS, 1)]
    await conn.executemany(
        "INSERT INTO rfp_items (id, rfp_id, question, answer, position) VALUES ($1, $2, $3, $4, $5)", rows)
    # And 5,000 items holding none of the terms but " ", so that the planner takes the index for
    # those with a trigram (it reads a few items by rfp_id whatever their text).
    await conn.execute(
        """INSERT INTO rfp_items (id, rfp_id, question, answer, position)
           SELECT 'item_f' || n, $1, 'Filler line', 'Filler text', 100 + n
             FROM generate_series(1, 5000) AS n""", rfp_id)
    await conn.execute("VACUUM ANALYZE rfp_items")

    for term in TERMS:
        pattern = like_pattern(term)
        before, total_before, used_before = await search(conn, rfp_id, pattern, through_index=False)
        after, total_after, _ = await search(conn, rfp_id, pattern, through_index=True)
        assert "rfp_items_search_trgm" not in used_before
        assert (after, total_after) == (before, total_before), term
        assert not any(item.startswith(("item_b", "item_t")) for item in after), term

    # What the scan finds, in the terms people type: case, answers, wildcards taken literally.
    expected = {
        "encrypt": [1, 2], "ENCRYPTED": [2], "hsm.": [2], "100%": [4], "0% o": [4], "a_b": [5],
        "a\\b": [5], "_": [5], "%": [4], "\\": [5], "ab": [8], "zz": [8], "日本語": [9], "回答": [9],
        "r" + chr(31) + "i": [10], "no such term": [],
    }
    for term, positions in expected.items():
        ids, total, _ = await search(conn, rfp_id, like_pattern(term), through_index=True)
        assert (ids, total) == ([f"item_s{n}" for n in positions], len(positions)), term


async def test_item_search__planned_through_the_trigram_index_at_20000_items(conn, admin, make_account,
                                                                           make_rfp):
    # 20,000 items in the RFP and as many in another account's, random texts, a rare term in
    # three of the RFP's (and in the other's). Nothing is disabled: after VACUUM ANALYZE (what
    # autovacuum does; it also flushes the GIN pending list the bulk insert filled) the planner
    # picks the index on its own, with custom plans as search_time_bounded sets them. Before
    # 0044 each statement read all 20,000 items by rfp_id and matched every text.
    rfp_id = await make_rfp(admin, "Large")
    other = await make_account()
    theirs = await make_rfp(other, "Theirs")
    await conn.execute(
        """INSERT INTO rfp_items (id, rfp_id, question, answer, state, confidence, position)
           SELECT 'item_' || r.k || n, r.id, 'Question ' || md5(n::text), 'Answer ' || md5((n * 7)::text),
                  'auto_answered', 0.95, n
             FROM generate_series(1, 20000) AS n, (VALUES ('a', $1), ('t', $2)) AS r(k, id)""",
        rfp_id, theirs,
    )
    await conn.execute(
        """UPDATE rfp_items SET question = question || ' Zebra crossing'
            WHERE id IN ('item_a7', 'item_a70', 'item_t7');
           UPDATE rfp_items SET answer = 'a zebra' WHERE id IN ('item_a7000', 'item_t700')"""
    )
    await conn.execute("VACUUM ANALYZE rfp_items")
    pattern = like_pattern("zebra")
    statements = {
        "search_rfp_items_page": [rfp_id, 50, 0, pattern, False, None],
        "review_items_page": [rfp_id, None, 50, 0, None, 500, None, pattern],
        "auto_answer_items": [rfp_id, admin.account_id, None, None, pattern, 0.8, None, BLANK, 50,
                              rfps.MAX_TEXT],
    }
    for name, args in statements.items():
        async with rfps.search_time_bounded(conn):  # as the service runs them
            plan = json.loads(await conn.fetchval("EXPLAIN (FORMAT JSON) " + db.query(name), *args))
            rows = await conn.fetch(db.query(name), *args)
        used = _index_names(plan[0]["Plan"])
        assert "rfp_items_search_trgm" in used and "rfp_items_rfp_id_position_key" not in used, (name, plan)
        ids = list(rows[0]["ids"]) if name == "auto_answer_items" else [row["id"] for row in rows]
        assert ids == ["item_a7", "item_a70", "item_a7000"], name


async def test_search_time_bounded__plans_each_statement_for_its_pattern(conn):
    # A prepared statement's generic plan cannot see the pattern, so it could not choose the
    # trigram index for a rare term; custom plans end with the search's transaction.
    async with rfps.search_time_bounded(conn):
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
    assert await conn.fetchval("SHOW plan_cache_mode") == "auto"
