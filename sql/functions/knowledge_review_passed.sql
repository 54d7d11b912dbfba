-- Whether an entry whose review date is `review_by` is stale (service/domain/library.py): the
-- date has passed, today being the UTC date. The one definition the library's listings and the
-- retrieval functions' `stale` share. A plain SQL expression, so PostgreSQL inlines it (an index
-- on review_by still serves a condition on it).
CREATE OR REPLACE FUNCTION knowledge_review_passed(review_by date) RETURNS boolean
STABLE LANGUAGE sql AS $$
    SELECT review_by < (now() AT TIME ZONE 'UTC')::date
$$;
