-- insert_web_session --
-- A new session of member $2 (the cookie's hash $1), live for $4 seconds; the membership is the
-- one its user last used in the web app from now on (members.web_session_at, migration 0038).
WITH used AS (
    UPDATE members SET web_session_at = now() WHERE id = $2
)
INSERT INTO web_sessions (token_hash, member_id, csrf_token, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4));

-- principal_by_session_hash --
-- The member, account and user behind a live session (unrevoked, unexpired), as
-- principal_by_token_hash returns them; a session holds both scopes (its member's role limits it).
-- Also the account's name and how many memberships the user has (every page's header offers
-- the others when there are several; members_user, migration 0038, counts them).
SELECT s.token_hash, ARRAY['read', 'write']::text[] AS scopes, s.csrf_token,
       m.id AS member_id, m.account_id, m.role::text AS role,
       u.id AS user_id, u.email,
       display_name(u.first_name, u.last_name, u.email) AS name,
       a.name AS account_name,
       (SELECT count(*)::integer FROM members o WHERE o.user_id = u.id) AS memberships
  FROM web_sessions s
  JOIN members m ON m.id = s.member_id
  JOIN users u ON u.id = m.user_id
  JOIN accounts a ON a.id = m.account_id
 WHERE s.token_hash = $1
   AND s.revoked_at IS NULL
   AND s.expires_at > now();

-- count_user_memberships --
-- How many accounts user $1 is a member of.
SELECT count(*) FROM members WHERE user_id = $1;

-- user_memberships --
-- A page of the accounts user $1 is a member of (the web app's account switcher), with their
-- role in each, by account name.
SELECT m.account_id, a.name AS account_name, m.role::text AS role, m.is_owner
  FROM members m
  JOIN accounts a ON a.id = m.account_id
 WHERE m.user_id = $1
 ORDER BY lower(a.name), a.id
 LIMIT $2 OFFSET $3;

-- lock_membership_of_user --
-- User $1's membership in account $2, to start a session of it (switching accounts): none when
-- they are not a member there, whether or not the account exists. Kept (FOR KEY SHARE) until the
-- transaction ends, so that removing it waits for the new session, which it then ends.
SELECT m.id, m.account_id, a.name AS account_name, u.email
  FROM members m
  JOIN accounts a ON a.id = m.account_id
  JOIN users u ON u.id = m.user_id
 WHERE m.user_id = $1 AND m.account_id = $2
   FOR KEY SHARE OF m;

-- end_web_session_to_switch --
-- Switching accounts: the live session $1 ends; returns the seconds it had left (none when it had
-- ended already), which the other membership's session gets: a switch never extends a session.
UPDATE web_sessions SET revoked_at = now()
 WHERE token_hash = $1 AND revoked_at IS NULL AND expires_at > now()
RETURNING extract(epoch FROM expires_at - now())::float8 AS seconds_left;

-- revoke_web_session --
-- Sign-out: the session ends on the server, whatever the browser keeps.
UPDATE web_sessions SET revoked_at = now() WHERE token_hash = $1 AND revoked_at IS NULL;

-- delete_old_web_sessions --
-- Sessions past their end (or revoked) a day ago: nothing reads them any more. How many went.
WITH gone AS (
    DELETE FROM web_sessions WHERE coalesce(revoked_at, expires_at) < now() - interval '1 day'
    RETURNING 1
)
SELECT count(*)::integer FROM gone;

-- list_rfps --
-- One page of an account's RFPs, newest first, as search_rfps returns them (the web app's list
-- without a search term).
WITH page AS (
    SELECT r.id, r.created_at
      FROM rfps r
     WHERE r.account_id = $1
     ORDER BY r.created_at DESC, r.id DESC
     LIMIT $2 OFFSET $3
)
SELECT o.id, o.title, o.description, o.deadline, o.framework, o.portal_url, o.created_at,
       o.updated_at, o.owner_id, o.state, o.total_items, o.needs_input_items,
       o.auto_answered_items, o.approved_items, o.overall_completion_percentage,
       u.email AS owner_email, display_name(u.first_name, u.last_name, u.email) AS owner_name
  FROM page
  JOIN rfp_overview o ON o.id = page.id
  JOIN users u ON u.id = o.owner_id
 ORDER BY page.created_at DESC, page.id DESC;

-- count_rfps_capped --
-- How many RFPs an account has, counting no further than $2 (the deepest page served): an exact
-- count of 300,000 RFPs reads all their index entries on every list page.
SELECT count(*)::integer FROM (SELECT 1 FROM rfps WHERE account_id = $1 LIMIT $2) AS r;

-- review_items_page --
-- One page of an RFP's items in order for review, with what the question that answered each
-- one found (attention points, references); $2 keeps only items in that state (null: every
-- state), $5 only that item (null: all), $7 only the items assigned to that user (null: all),
-- $8 only the items whose question or answer matches that ILIKE pattern (null: all; the RFP
-- page's search, service/domain/rfps.py search_pattern: its wildcards escaped, its term limits).
-- rfp_items_search_trgm (migration 0044) serves $8, as in rfps.sql search_rfp_items_page: with
-- custom plans (review_items runs a search under search_time_bounded) `$8 IS NULL` folds away
-- and the OR of the two ILIKEs is the index's; without $8 the RFP's items come by rfp_id.
-- Questions and answers are cut to $6 characters, with their whole lengths beside them: a page
-- of 100 items of 100,000 characters was a 62 MB page that held the event loop for 0.3 s.
-- One row with the total and nulls when the page is past the end (no item passes, or a page
-- number beyond the last): the count is always the filters'.
-- `total` is how many items pass the filters, counted from their ids and positions alone: a
-- count(*) OVER () beside the whole rows carried every passing item's text through the window
-- (20 MB spilled to disk for 20,000 items of 1 KB: 175 ms for a term they all held).
WITH passing AS MATERIALIZED (
    SELECT i.id, i.position
      FROM rfp_items i
     WHERE i.rfp_id = $1 AND ($2::text IS NULL OR i.state::text = $2)
       AND ($5::text IS NULL OR i.id = $5)
       AND ($7::bigint IS NULL OR i.assignee_id = $7)
       AND ($8::text IS NULL OR i.question ILIKE $8 OR i.answer ILIKE $8)
), page AS (
    SELECT id, position FROM passing ORDER BY position LIMIT $3 OFFSET $4
)
SELECT i.id, left(i.question, $6) AS question, length(i.question) AS question_chars,
       left(i.answer, $6) AS answer, length(i.answer) AS answer_chars,
       i.state::text AS state, i.confidence, i.section, i.position, i.updated_at,
       i.question_id, i.knowledge_item_id, i.assignee_id, a.email AS assignee_email,
       display_name(a.first_name, a.last_name, a.email) AS assignee_name,
       q.state AS question_state, coalesce(q.requires_attention, false) AS requires_attention,
       q.attention_points, q.references, counted.total
  FROM (SELECT count(*) AS total FROM passing) AS counted
  LEFT JOIN (page JOIN rfp_items i ON i.id = page.id) ON true
  LEFT JOIN questions q ON q.id = i.question_id
  LEFT JOIN users a ON a.id = i.assignee_id
 ORDER BY page.position;

-- auto_answer_items --
-- What the RFP page's "Approve all … auto-answer items" approves under the page's filters
-- (review_items_page's: $3 the state, null every one; $4 the assignee, null anyone's; $5 the
-- ILIKE pattern, null no search; served as there, by rfp_items_search_trgm with custom plans),
-- across the whole RFP $1 of account $2: the items answered and
-- not yet approved or discarded, in the auto-answer band (service/domain/bands.py band:
-- confidence at least $6, no attention asked), whose answer is not blank ($8: the characters
-- Python's str.strip() takes, so that the page and the approval agree on blank; an answer's
-- first character settles it but for the few that open with one, sparing a btrim() of every
-- answer) and no longer than an approval accepts ($10, rfps.MAX_TEXT characters: an item drafted
-- longer before drafts were cut there stopped every press at itself; octet_length, read from the
-- stored header, spares counting the characters of all but the longest), and with $7 only those
-- unchanged since then. `total`, how many; `ids`, the first $9
-- in questionnaire order; `seen`, the page's time (it sends it back as $7): the statement's, or
-- just before the oldest transaction that has written and not yet committed began
-- (writes_settled_before, sql/functions). An
-- item's updated_at is set before its writer commits (most writes' now(), their transaction's
-- start): one written before this statement and committed after the page read its items (a long
-- import) leaves the page showing the old answer with an updated_at before the statement's time,
-- and the bulk approval took it as unchanged. (One that began before the page and writes an
-- item only after it: the writes of an item's answer and state stamp updated_at with the
-- write's time, clock_timestamp(), later than `seen`: answer_rfp_item, review_rfp_item.)
WITH band AS MATERIALIZED (
    SELECT i.id, i.position
      FROM rfp_items i
      JOIN rfps r ON r.id = i.rfp_id AND r.account_id = $2
      LEFT JOIN questions q ON q.id = i.question_id
     WHERE i.rfp_id = $1 AND i.state NOT IN ('pending', 'approved', 'discarded')
       AND ($3::text IS NULL OR i.state::text = $3)
       AND ($4::bigint IS NULL OR i.assignee_id = $4)
       AND ($5::text IS NULL OR i.question ILIKE $5 OR i.answer ILIKE $5)
       AND (strpos($8, left(i.answer, 1)) = 0 OR btrim(i.answer, $8) <> '')
       AND (octet_length(i.answer) <= $10 OR char_length(i.answer) <= $10)
       AND i.confidence >= $6::double precision AND NOT coalesce(q.requires_attention, false)
       AND ($7::timestamptz IS NULL OR i.updated_at <= $7)
)
SELECT (SELECT count(*) FROM band)::integer AS total,
       array(SELECT id FROM band ORDER BY position LIMIT $9) AS ids,
       writes_settled_before() AS seen;

-- search_knowledge_items --
-- One page of an account's entries whose question, answer or title matches an ILIKE pattern
-- (null: every entry), newest first. knowledge_search_text (migration 0029) is the three fields
-- joined by U+001F and has the trigram index; a pattern holding U+001F is rechecked field by
-- field (with custom plans, search.sql plan_each_search, the strpos folds away otherwise). No
-- count here: count(*) OVER () made every page match every entry (count_knowledge_items_capped
-- stops at the deepest page served).
SELECT k.*
  FROM knowledge_items k
 WHERE k.account_id = $1
   AND ($2::text IS NULL
        OR knowledge_search_text(k.question, k.answer, k.title) ILIKE $2
           AND (strpos($2, E'\x1f') = 0 OR k.question ILIKE $2 OR k.answer ILIKE $2
                OR k.title ILIKE $2))
 ORDER BY k.created_at DESC, k.id DESC
 LIMIT $3 OFFSET $4;

-- count_knowledge_items_capped --
-- How many of an account's entries search_knowledge_items matches, counting no further than $3.
SELECT count(*)::integer
  FROM (SELECT 1
          FROM knowledge_items k
         WHERE k.account_id = $1
           AND ($2::text IS NULL
                OR knowledge_search_text(k.question, k.answer, k.title) ILIKE $2
                   AND (strpos($2, E'\x1f') = 0 OR k.question ILIKE $2 OR k.answer ILIKE $2
                        OR k.title ILIKE $2))
         LIMIT $3) AS matches;
