-- Keeps knowledge_terms (document frequencies) and knowledge_stats (entry counts) in step with
-- knowledge_items, one statement at a time: the triggers (migration 0003) hand it transition
-- tables, so a bulk import costs one upsert per distinct lexeme, not one per row.
--
-- Every statement takes its locks in one order: the lexemes it changes, sorted, in one upsert,
-- then the account's knowledge_stats row. An UPDATE nets each lexeme's change (old rows -1, new
-- rows +1) in that one upsert and leaves unchanged lexemes and the entry count alone. It once ran
-- two sorted upserts (the old rows' lexemes, the stats row, then the new rows' lexemes): two
-- reviews saving entries at once could each hold a lexeme the other wanted next and deadlock
-- (a probe: 500s on PATCH rfp_items with save_to_knowledge_base from two processes).
CREATE OR REPLACE FUNCTION knowledge_terms_after_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO knowledge_terms AS t (account_id, lexeme, df)
        SELECT c.account_id, c.lexeme, sum(c.change)::integer
          FROM (SELECT o.account_id, l.lexeme, -1 AS change
                  FROM old_rows o, unnest(tsvector_to_array(o.search_vector)) AS l(lexeme)
                UNION ALL
                SELECT n.account_id, l.lexeme, 1
                  FROM new_rows n, unnest(tsvector_to_array(n.search_vector)) AS l(lexeme)) c
         GROUP BY c.account_id, c.lexeme
        HAVING sum(c.change) <> 0
         ORDER BY c.account_id, c.lexeme
        ON CONFLICT (account_id, lexeme) DO UPDATE SET df = greatest(t.df + excluded.df, 0);
        INSERT INTO knowledge_stats AS s (account_id, items)
        SELECT c.account_id, sum(c.change)::integer
          FROM (SELECT o.account_id, -1 AS change FROM old_rows o
                UNION ALL
                SELECT n.account_id, 1 FROM new_rows n) c
         GROUP BY c.account_id
        HAVING sum(c.change) <> 0
         ORDER BY c.account_id
        ON CONFLICT (account_id) DO UPDATE SET items = greatest(s.items + excluded.items, 0);
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO knowledge_terms AS t (account_id, lexeme, df)
        SELECT o.account_id, l.lexeme, -count(*)
          FROM old_rows o, unnest(tsvector_to_array(o.search_vector)) AS l(lexeme)
         GROUP BY o.account_id, l.lexeme
         ORDER BY o.account_id, l.lexeme
        ON CONFLICT (account_id, lexeme) DO UPDATE SET df = greatest(t.df + excluded.df, 0);
        INSERT INTO knowledge_stats AS s (account_id, items)
        SELECT o.account_id, -count(*) FROM old_rows o GROUP BY o.account_id ORDER BY o.account_id
        ON CONFLICT (account_id) DO UPDATE SET items = greatest(s.items + excluded.items, 0);
    ELSE
        INSERT INTO knowledge_terms AS t (account_id, lexeme, df)
        SELECT n.account_id, l.lexeme, count(*)
          FROM new_rows n, unnest(tsvector_to_array(n.search_vector)) AS l(lexeme)
         GROUP BY n.account_id, l.lexeme
         ORDER BY n.account_id, l.lexeme
        ON CONFLICT (account_id, lexeme) DO UPDATE SET df = t.df + excluded.df;
        INSERT INTO knowledge_stats AS s (account_id, items)
        SELECT n.account_id, count(*) FROM new_rows n GROUP BY n.account_id ORDER BY n.account_id
        ON CONFLICT (account_id) DO UPDATE SET items = s.items + excluded.items;
    END IF;
    RETURN NULL;
END
$$;
