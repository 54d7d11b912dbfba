-- Foundation: accounts (tenants), users, memberships, API tokens, credits, rate limits, RFPs and items.
-- Forward-only: once landed, never edit this file; add a new numbered one.

CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TYPE subscription_status AS ENUM (
    'active',    -- may consume credits
    'inactive'   -- usage_blocked: reads still work, nothing is charged
);

CREATE TABLE accounts (
    id                  text PRIMARY KEY,                -- acct_…
    name                text NOT NULL,
    credits             integer NOT NULL DEFAULT 0 CHECK (credits >= 0),
    subscription_status subscription_status NOT NULL DEFAULT 'active',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email             text NOT NULL,
    first_name        text NOT NULL DEFAULT '',
    last_name         text NOT NULL DEFAULT '',
    password_hash     text,                               -- argon2id; null until one is set
    confirmed_at      timestamptz,                        -- null: may not obtain tokens yet
    terms_accepted_at timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
-- One user per address, whatever its case.
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

-- How a user is shown: "First Last", or the e-mail's local part when no name is known.
CREATE FUNCTION display_name(first_name text, last_name text, email text) RETURNS text
IMMUTABLE LANGUAGE sql AS $$
    SELECT coalesce(nullif(btrim(first_name || ' ' || last_name), ''), split_part(email, '@', 1))
$$;

CREATE TYPE member_role AS ENUM (
    'admin',   -- everything, including creating users and invitations
    'member',  -- reads and writes RFPs, knowledge base and questions
    'viewer'   -- reads; may ask questions
);

CREATE TABLE members (
    id         text PRIMARY KEY,                          -- mbr_…
    account_id text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    user_id    bigint NOT NULL REFERENCES users ON DELETE CASCADE,
    role       member_role NOT NULL,
    is_owner   boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (account_id, user_id)
);
CREATE UNIQUE INDEX members_one_owner ON members (account_id) WHERE is_owner;

CREATE TABLE api_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    member_id    text NOT NULL REFERENCES members ON DELETE CASCADE,
    token_hash   bytea NOT NULL UNIQUE,                   -- sha256 of the token; the token is shown once
    scopes       text[] NOT NULL CHECK (scopes <@ ARRAY['read', 'write']::text[]),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,                             -- null: does not expire
    revoked_at   timestamptz
);
CREATE INDEX api_tokens_member ON api_tokens (member_id);

-- Every change of an account's credits, so that sum(amount) = accounts.credits.
CREATE TABLE credit_ledger (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id  text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    amount      integer NOT NULL CHECK (amount <> 0),     -- positive: grant or refund; negative: debit
    reason      text NOT NULL,                            -- grant, question, refund, rfp_item …
    subject_id  text,                                     -- the question or item charged, if any
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credit_ledger_account ON credit_ledger (account_id, created_at);

-- Token buckets shared by every service process.
CREATE TABLE rate_limit_buckets (
    bucket_key  text PRIMARY KEY,                         -- {route name}:{member id}
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL
);

-- Take one token from a bucket of `capacity` refilled at `refill_per_second`.
-- Returns whether it was allowed, the tokens left, and seconds until one token is back.
CREATE FUNCTION take_rate_limit_token(key text, capacity double precision, refill_per_second double precision)
RETURNS TABLE (allowed boolean, remaining double precision, retry_after double precision)
LANGUAGE plpgsql AS $$
DECLARE
    now_ts  timestamptz := clock_timestamp();
    current double precision;
BEGIN
    INSERT INTO rate_limit_buckets (bucket_key, tokens, refilled_at)
    VALUES (key, capacity, now_ts)
    ON CONFLICT (bucket_key) DO NOTHING;

    SELECT least(capacity, b.tokens + extract(epoch FROM now_ts - b.refilled_at) * refill_per_second)
      INTO current
      FROM rate_limit_buckets b
     WHERE b.bucket_key = key
       FOR UPDATE;

    IF current >= 1 THEN
        UPDATE rate_limit_buckets SET tokens = current - 1, refilled_at = now_ts WHERE bucket_key = key;
        RETURN QUERY SELECT true, current - 1, greatest(0, (1 - (current - 1)) / refill_per_second);
    ELSE
        UPDATE rate_limit_buckets SET tokens = current, refilled_at = now_ts WHERE bucket_key = key;
        RETURN QUERY SELECT false, current, (1 - current) / refill_per_second;
    END IF;
END;
$$;

CREATE TABLE rfps (
    id          text PRIMARY KEY,                         -- rfp_…
    account_id  text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    owner_id    bigint NOT NULL REFERENCES users,
    title       text NOT NULL CHECK (btrim(title) <> ''),
    description text,
    deadline    date,
    framework   text CHECK (framework IN ('nist-csf-2.0', 'hecvat-3.06', 'hecvat-4.1', 'rh-1.0', 'cjis-5', 'cjis-6')),
    portal_url  text,
    context     text,                                     -- background for the answer engine
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
-- Listing and search order: newest first within an account.
CREATE INDEX rfps_account_newest ON rfps (account_id, created_at DESC, id DESC);
-- Case-insensitive substring search (ILIKE '%term%') on title and description.
CREATE INDEX rfps_title_trgm ON rfps USING gin (title gin_trgm_ops);
CREATE INDEX rfps_description_trgm ON rfps USING gin (description gin_trgm_ops);

CREATE TYPE rfp_item_state AS ENUM (
    'pending',        -- not answered yet
    'auto_answered',  -- the engine answered with confidence
    'needs_input',    -- the engine could not answer confidently; a person must
    'approved',       -- a person approved the answer
    'discarded'       -- not part of the response; excluded from stats
);

CREATE TABLE rfp_items (
    id          text PRIMARY KEY,                         -- item_…
    rfp_id      text NOT NULL REFERENCES rfps ON DELETE CASCADE,
    question    text NOT NULL,
    answer      text,
    state       rfp_item_state NOT NULL DEFAULT 'pending',
    confidence  real CHECK (confidence BETWEEN 0 AND 1),
    section     text,
    position    integer NOT NULL,                         -- order within the questionnaire, from 1
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (rfp_id, position)
);

-- An RFP with its item counts and the state that follows from them; discarded items excluded.
CREATE VIEW rfp_overview AS
SELECT r.*,
       s.total_items,
       s.needs_input_items,
       s.auto_answered_items,
       s.approved_items,
       s.pending_items,
       CASE WHEN s.total_items = 0 THEN 0
            ELSE (s.approved_items * 100 / s.total_items)::integer
       END AS overall_completion_percentage,
       CASE WHEN s.total_items = 0 THEN 'new'
            WHEN s.approved_items = s.total_items THEN 'approved'
            WHEN s.needs_input_items > 0 THEN 'needs_input'
            ELSE 'items_generated'
       END AS state
  FROM rfps r
  CROSS JOIN LATERAL (
      SELECT count(*) FILTER (WHERE i.state <> 'discarded')::integer     AS total_items,
             count(*) FILTER (WHERE i.state = 'needs_input')::integer    AS needs_input_items,
             count(*) FILTER (WHERE i.state = 'auto_answered')::integer  AS auto_answered_items,
             count(*) FILTER (WHERE i.state = 'approved')::integer       AS approved_items,
             count(*) FILTER (WHERE i.state = 'pending')::integer        AS pending_items
        FROM rfp_items i
       WHERE i.rfp_id = r.id
  ) s;
