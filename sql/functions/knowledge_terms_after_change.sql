-- Keeps knowledge_terms (document frequencies) and knowledge_stats (entry counts) in step with
-- knowledge_items, one statement at a time: the triggers (migration 0003) hand it transition
-- tables, so a bulk import costs one upsert per distinct lexeme, not one per row. Sorted upserts
-- keep concurrent imports from deadlocking on the same lexemes.
CREATE OR REPLACE FUNCTION knowledge_terms_after_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO knowledge_terms AS t (account_id, lexeme, df)
        SELECT o.account_id, l.lexeme, -count(*)
          FROM old_rows o, unnest(tsvector_to_array(o.search_vector)) AS l(lexeme)
         GROUP BY o.account_id, l.lexeme
         ORDER BY o.account_id, l.lexeme
        ON CONFLICT (account_id, lexeme) DO UPDATE SET df = greatest(t.df + excluded.df, 0);
        INSERT INTO knowledge_stats AS s (account_id, items)
        SELECT o.account_id, -count(*) FROM old_rows o GROUP BY o.account_id ORDER BY o.account_id
        ON CONFLICT (account_id) DO UPDATE SET items = greatest(s.items + excluded.items, 0);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
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
