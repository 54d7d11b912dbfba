-- insert_account --
-- A new account (tenant) with its starting credits.
INSERT INTO accounts (id, name, credits, subscription_status)
VALUES ($1, $2, $3, 'active')
RETURNING id, name, credits;

-- upsert_user --
-- The user with this e-mail (any case), created confirmed if new; returns its id.
WITH existing AS (
    SELECT id FROM users WHERE lower(email) = lower($1)
), created AS (
    INSERT INTO users (email, first_name, last_name, confirmed_at, terms_accepted_at)
    SELECT $1, $2, $3, now(), now()
     WHERE NOT EXISTS (SELECT 1 FROM existing)
    RETURNING id
)
SELECT id FROM existing UNION ALL SELECT id FROM created;

-- insert_member --
-- A membership of a user in an account.
INSERT INTO members (id, account_id, user_id, role, is_owner)
VALUES ($1, $2, $3, $4::member_role, $5)
RETURNING id, user_id, role::text AS role;

-- member_by_email --
-- The membership of the user with this e-mail in an account.
SELECT m.id, m.user_id, m.role::text AS role, u.email
  FROM members m JOIN users u ON u.id = m.user_id
 WHERE m.account_id = $1 AND lower(u.email) = lower($2);

-- add_credits --
-- Change an account's credits; the CHECK keeps the balance from going negative.
UPDATE accounts SET credits = credits + $2, updated_at = now() WHERE id = $1 RETURNING credits;

-- insert_ledger_entry --
-- Record one change of credits; sum(amount) per account equals its balance.
INSERT INTO credit_ledger (account_id, amount, reason, subject_id) VALUES ($1, $2, $3, $4);

-- set_subscription --
-- Turn an account's subscription on or off.
UPDATE accounts SET subscription_status = $2::subscription_status, updated_at = now()
 WHERE id = $1 RETURNING id;

-- account_exists --
-- Whether an account with this id exists.
SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1);

-- any_account --
-- Whether the database holds any account yet (first start creates the demo).
SELECT EXISTS (SELECT 1 FROM accounts);
