-- Take one token from a bucket of `capacity` refilled at `refill_per_second`, the buckets being
-- shared by every service process (rate_limit_buckets). Returns whether it was allowed, the
-- tokens left, and seconds until one token is back.
CREATE OR REPLACE FUNCTION take_rate_limit_token(key text, capacity double precision, refill_per_second double precision)
RETURNS TABLE (allowed boolean, remaining double precision, retry_after double precision)
LANGUAGE plpgsql AS $$
DECLARE
    now_ts  timestamptz := clock_timestamp();
    current double precision;
BEGIN
    -- Again when the bucket is gone by the SELECT: housekeeping deletes idle buckets (full ones,
    -- the same as none) and may do so between the two statements.
    LOOP
        INSERT INTO rate_limit_buckets (bucket_key, tokens, refilled_at)
        VALUES (key, capacity, now_ts)
        ON CONFLICT (bucket_key) DO NOTHING;

        SELECT least(capacity, b.tokens + extract(epoch FROM now_ts - b.refilled_at) * refill_per_second)
          INTO current
          FROM rate_limit_buckets b
         WHERE b.bucket_key = key
           FOR UPDATE;
        EXIT WHEN FOUND;
    END LOOP;

    IF current >= 1 THEN
        UPDATE rate_limit_buckets SET tokens = current - 1, refilled_at = now_ts WHERE bucket_key = key;
        RETURN QUERY SELECT true, current - 1, greatest(0, (1 - (current - 1)) / refill_per_second);
    ELSE
        UPDATE rate_limit_buckets SET tokens = current, refilled_at = now_ts WHERE bucket_key = key;
        RETURN QUERY SELECT false, current, (1 - current) / refill_per_second;
    END IF;
END;
$$;
