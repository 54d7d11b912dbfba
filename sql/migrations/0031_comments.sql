-- What each table, view and enum type holds, and the columns whose meaning the name and type do
-- not tell (units, which id a column holds, enum-like codes, leases, hashes, secrets), as
-- COMMENT ON, so that psql's \d+, \dt+ and \dT+ show them. Taken from the migrations' own
-- comments and the code that reads and writes each column. Functions are left out: they are
-- re-created from sql/functions/ at every start, where each file explains itself.
-- Forward-only: once landed, never edit this file; a changed comment is a new migration.
-- A new table, view or enum type carries its COMMENT in the migration that creates it
-- (tests/service/test_migrations.py fails otherwise).

-- -- enum types -----------------------------------------------------------------------------

COMMENT ON TYPE subscription_status IS
    'An account''s subscription: active (questions may be asked and charged) or inactive (usage_blocked: reads still work, nothing is charged). Set by the operator with `python -m service subscription set`.';
COMMENT ON TYPE member_role IS
    'A member''s role in an account: admin (everything, including members and invitations), member (reads and writes RFPs, knowledge base and questions) or viewer (reads; may ask questions).';
COMMENT ON TYPE rfp_item_state IS
    'An RFP item: pending (not answered yet, or being answered while rfp_items.question_id is set), auto_answered or needs_input (set by its question''s answer, by confidence band), approved (a person approved the answer), discarded (left out of the response and of the counts). A review may move it to approved, discarded or back to pending (reopened).';
COMMENT ON TYPE question_state IS
    'A question''s pipeline, in order: new (asked and charged) -> ready_to_answer (RFP context captured) -> references_fetched (knowledge-base entries stored) -> answered (draft or engine failure stored) -> confidence_calculated -> complete (final; answer published). Each step is a guarded transition by the process holding the lease.';
COMMENT ON TYPE invitation_state IS
    'An invitation: pending (sent, not accepted; shown as expired once expires_at has passed) -> accepted (used once, the invitee is a member) or revoked (replaced by a newer invitation to the same address; its link no longer works).';
COMMENT ON TYPE mail_state IS
    'An outbox message: pending (to be sent, or retried at next_attempt_at) -> sent (handed to the SMTP server), failed (gave up after mail.max_attempts) or held (no SMTP host configured: kept, body included, for `python -m service mail show ID`). The body is erased on sent and failed.';
COMMENT ON TYPE webhook_delivery_state IS
    'A webhook delivery: pending (due at next_attempt_at, or being attempted under a lease) -> delivered (the endpoint answered 2xx) or failed (retries ran past retry_until); an admin''s manual retry makes a finished delivery pending again.';

-- -- accounts, users, members, tokens ---------------------------------------------------------

COMMENT ON TABLE accounts IS
    'Tenants: every RFP, knowledge-base entry, question and member belongs to one account. id is acct_….';
COMMENT ON COLUMN accounts.credits IS
    'Credits left (never negative); every change is a credit_ledger row, so the ledger''s sum(amount) for the account equals this.';
COMMENT ON COLUMN accounts.subscription_status IS
    'inactive: questions and "answer all" are refused with 403 usage_blocked; reads still work.';

COMMENT ON TABLE users IS
    'People who sign in, across accounts (one row per e-mail address, whatever its case); their membership of each account is a members row. users.id is a bigint, unlike the text ids (mbr_…) of members.';
COMMENT ON COLUMN users.password_hash IS
    'argon2id hash of the password; null until one is set. Secret: never copy it out of the database.';
COMMENT ON COLUMN users.confirmed_at IS
    'When the e-mail address was confirmed (by link, invitation or account creation); null: sign-in is refused until it is.';
COMMENT ON COLUMN users.terms_accepted_at IS
    'When the user accepted the terms of service (confirmation link or invitation acceptance).';
COMMENT ON COLUMN users.password_chosen_by_user IS
    'true: the password was chosen by the user (confirmation, invitation, change or reset). false: chosen by an administrator (POST /users before migration 0020) or none; sign-in is then refused until the user resets it.';

COMMENT ON TABLE members IS
    'A user''s membership of an account, with its role. id is mbr_…; this is the id the API calls a member, and what knowledge_items.owner_member_id, api_tokens and web_sessions hold.';
COMMENT ON COLUMN members.user_id IS
    'The person: a users.id (bigint).';
COMMENT ON COLUMN members.is_owner IS
    'The account''s owner (at most one per account); the owner cannot be removed or given another role. Not related to rfps.owner_id or knowledge_items.owner_member_id.';

COMMENT ON TABLE api_tokens IS
    'API bearer tokens (rfpk_…) of a membership. Only the SHA-256 of a token is stored; the token itself is shown once, when created.';
COMMENT ON COLUMN api_tokens.member_id IS
    'The membership the token acts as (members.id, mbr_…).';
COMMENT ON COLUMN api_tokens.token_hash IS
    'SHA-256 of the token (32 bytes); the token cannot be recovered from it.';
COMMENT ON COLUMN api_tokens.scopes IS
    'What the token may do: read and/or write.';
COMMENT ON COLUMN api_tokens.expires_at IS
    'null: does not expire.';
COMMENT ON COLUMN api_tokens.revoked_at IS
    'Set when revoked (by the member, an admin, the CLI or a password change); a revoked token is refused.';
COMMENT ON COLUMN api_tokens.source IS
    'How the token was made, shown in the member''s token list: sign_in (signing in with a password), cli (`python -m service token create` or `account create`), demo (the demo account).';

COMMENT ON TABLE credit_ledger IS
    'Every change of an account''s credits, written with the change: sum(amount) per account equals accounts.credits.';
COMMENT ON COLUMN credit_ledger.amount IS
    'Credits: positive for a grant or refund, negative for a debit; never 0.';
COMMENT ON COLUMN credit_ledger.reason IS
    'grant (account creation or `credits add`), adjustment (a negative `credits add`), question (a question asked, also per item of "answer all"), refund (an engine failure gave the credits back).';
COMMENT ON COLUMN credit_ledger.subject_id IS
    'The question (q_…) charged or refunded; null for grants and adjustments.';

COMMENT ON TABLE rate_limit_buckets IS
    'Token buckets for rate limits, shared by every service process; a bucket untouched for the longest configured period is deleted by housekeeping (it would be full again).';
COMMENT ON COLUMN rate_limit_buckets.bucket_key IS
    '{route name}:{member id, or client address without a token}; sign-in buckets are sign_in:address:{client} and sign_in:email:{SHA-256 hex of the address tried}.';
COMMENT ON COLUMN rate_limit_buckets.tokens IS
    'Requests left in the bucket as of refilled_at (fractional); it refills continuously up to the route''s limit.';
COMMENT ON COLUMN rate_limit_buckets.refilled_at IS
    'When tokens was last computed (the last request taken or refused).';

COMMENT ON TABLE email_confirmations IS
    'One-time e-mail confirmation links, stored only as the SHA-256 of their token; deleted by housekeeping a day after they expire.';
COMMENT ON COLUMN email_confirmations.token_hash IS
    'SHA-256 of the link''s token; the link itself is only in the mail.';
COMMENT ON COLUMN email_confirmations.used_at IS
    'Set when used: a link works once.';

COMMENT ON TABLE invitations IS
    'Invitations to join an account (id inv_…); the link''s token is stored only as its SHA-256. At most one pending invitation per address and account: re-inviting revokes the old one.';
COMMENT ON COLUMN invitations.token_hash IS
    'SHA-256 of the invitation link''s token.';
COMMENT ON COLUMN invitations.invited_by IS
    'The member who invited (members.id, mbr_…); null once that member is removed.';
COMMENT ON COLUMN invitations.member_id IS
    'The membership created on acceptance (members.id, mbr_…); null until accepted.';
COMMENT ON COLUMN invitations.role IS
    'The role the invitee gets on acceptance.';

COMMENT ON TABLE mail_outbox IS
    'Outgoing mail, written in the transaction of the user or invitation it belongs to and sent by a background sender in any process. Deleted by housekeeping mail.keep_days after it was written, once no longer pending (held mail not before its links expire).';
COMMENT ON COLUMN mail_outbox.message_id IS
    'The Message-ID header, the same on every attempt.';
COMMENT ON COLUMN mail_outbox.body IS
    'The message text, which holds a one-time link (confirmation, invitation, password reset): secret while pending or held; erased once sent or given up.';
COMMENT ON COLUMN mail_outbox.attempts IS
    'Send attempts so far (each claim counts one); at mail.max_attempts a failure gives up (failed).';
COMMENT ON COLUMN mail_outbox.next_attempt_at IS
    'When a pending message is due; while a sender holds it, the end of its lease (claim time + lease).';
COMMENT ON COLUMN mail_outbox.last_error IS
    'Why the last attempt failed, if it did.';

COMMENT ON TABLE password_resets IS
    'One-time password reset links, stored only as the SHA-256 of their token; deleted by housekeeping a day after they expire.';
COMMENT ON COLUMN password_resets.token_hash IS
    'SHA-256 of the link''s token; the link itself is only in the mail.';
COMMENT ON COLUMN password_resets.used_at IS
    'Set when used: a link works once.';

COMMENT ON TABLE sign_in_known_clients IS
    'Clients a user signed in from successfully: once the per-e-mail sign-in limit is reached these may still try, so a stranger''s failures cannot lock the user out of their usual network.';
COMMENT ON COLUMN sign_in_known_clients.client IS
    'An IPv4 address, or an IPv6 /64 network, as text.';

COMMENT ON TABLE web_sessions IS
    'Signed-in browser sessions of the web app. Only the SHA-256 of the session cookie is stored; deleting a row (or signing out) ends the session at once.';
COMMENT ON COLUMN web_sessions.token_hash IS
    'SHA-256 of the session cookie.';
COMMENT ON COLUMN web_sessions.member_id IS
    'The membership signed in (members.id, mbr_…).';
COMMENT ON COLUMN web_sessions.csrf_token IS
    'The session''s anti-CSRF token, in clear: every form and state-changing request must carry it. Secret.';

COMMENT ON TABLE audit_events IS
    'The audit log: who did what to which record, written in the transaction of the change itself. Housekeeping never deletes it (an account''s deletion does); exported with `python -m service audit export`.';
COMMENT ON COLUMN audit_events.account_id IS
    'null only for an event tied to no account (a failed sign-in for an unknown address).';
COMMENT ON COLUMN audit_events.actor_type IS
    'member (through a token or web session), operator (the CLI) or anonymous (sign-in attempt, e-mail confirmation, invitation acceptance).';
COMMENT ON COLUMN audit_events.actor_id IS
    'members.id (mbr_…) for a member; the OS user for an operator; null when anonymous.';
COMMENT ON COLUMN audit_events.actor_label IS
    'The member''s e-mail address, the address a sign-in named, or "cli" for an operator.';
COMMENT ON COLUMN audit_events.action IS
    'What happened, as record_type.verb: rfp.created, rfp_item.updated, auth.sign_in_failed, ….';
COMMENT ON COLUMN audit_events.record_id IS
    'The id of the record acted on (a users.id as text for user events).';
COMMENT ON COLUMN audit_events.request_id IS
    'The HTTP request''s id (X-Request-Id); null outside HTTP.';
COMMENT ON COLUMN audit_events.before IS
    'For a change: the changed fields'' values before it. Secrets are never written.';
COMMENT ON COLUMN audit_events.after IS
    'The changed (or created) fields'' values after it. Secrets are never written.';

-- -- RFPs ---------------------------------------------------------------------------------------

COMMENT ON TABLE rfps IS
    'RFPs and security questionnaires (id rfp_…); their questions are rfp_items. rfp_overview adds item counts and the derived state.';
COMMENT ON COLUMN rfps.owner_id IS
    'The user who owns the RFP (its creator, or `rfp create --owner-email`): a users.id (bigint), not a members.id; the API shows it as owner.';
COMMENT ON COLUMN rfps.framework IS
    'The questionnaire framework, one of nist-csf-2.0, hecvat-3.06, hecvat-4.1, rh-1.0, cjis-5, cjis-6; null if none.';
COMMENT ON COLUMN rfps.context IS
    'Background the answer engine is given with every question of this RFP.';

COMMENT ON TABLE rfp_items IS
    'The questions of an RFP (id item_…), in questionnaire order, with their answers and review state.';
COMMENT ON COLUMN rfp_items.confidence IS
    'The answering question''s confidence, 0 to 1; null until answered.';
COMMENT ON COLUMN rfp_items.position IS
    'Order within the RFP, from 1; unique per RFP.';
COMMENT ON COLUMN rfp_items.question_id IS
    'The question (questions.id, q_…) asked for this item by "answer all"; no foreign key. While the item is pending with this set, answering is in flight; reopening the item clears it.';
COMMENT ON COLUMN rfp_items.knowledge_item_id IS
    'The knowledge-base entry (knowledge_items.id, kb_…) this item''s approved answer was saved as, if any.';
COMMENT ON COLUMN rfp_items.questionnaire_file_id IS
    'The imported questionnaire file the item came from, for writing answers back into it.';
COMMENT ON COLUMN rfp_items.source_sheet IS
    'The XLSX sheet the question came from; null for CSV.';
COMMENT ON COLUMN rfp_items.source_row IS
    'The 1-based row of the question in that sheet or CSV file.';
COMMENT ON COLUMN rfp_items.answer_column IS
    'The 0-based column the answer is written into on write-back.';

COMMENT ON VIEW rfp_overview IS
    'Each RFP (every rfps column) with its item counts, discarded items excluded, and the state the API shows, derived from them.';
COMMENT ON COLUMN rfp_overview.owner_id IS
    'As rfps.owner_id: a users.id (bigint), not a members.id.';
COMMENT ON COLUMN rfp_overview.total_items IS
    'Items not discarded.';
COMMENT ON COLUMN rfp_overview.pending_items IS
    'Items pending, those in flight (processing_items) included.';
COMMENT ON COLUMN rfp_overview.processing_items IS
    'Pending items whose question is being answered (rfp_items.question_id set).';
COMMENT ON COLUMN rfp_overview.overall_completion_percentage IS
    'approved_items * 100 / total_items, rounded down; 0 without items.';
COMMENT ON COLUMN rfp_overview.state IS
    'First match wins: new (no items), processing_items (some item in flight), approved (every item approved), needs_input (some item needs a person), items_generated (otherwise).';

COMMENT ON TABLE questionnaire_files IS
    'Questionnaire files imported into an RFP (id qf_…), kept once per RFP and content, so answers can be written back into the customer''s own file.';
COMMENT ON COLUMN questionnaire_files.sha256 IS
    'SHA-256 of content: the same file imported twice into an RFP is stored once.';
COMMENT ON COLUMN questionnaire_files.content IS
    'The file''s bytes as uploaded (customer data).';

-- -- questions ----------------------------------------------------------------------------------

COMMENT ON TABLE questions IS
    'Questions asked of the answer engine (id q_…), charged when asked, moved along question_state by the pipeline of whichever process holds the lease. A question asked by "answer all" answers an RFP item.';
COMMENT ON COLUMN questions.user_id IS
    'The person who asked: a users.id (bigint); kept when the membership is removed, and shown by the API as user.id.';
COMMENT ON COLUMN questions.member_id IS
    'The membership that asked (members.id, mbr_…), the scope of its Idempotency-Key; null once that member is removed.';
COMMENT ON COLUMN questions.rfp_item_id IS
    'The RFP item this question answers ("answer all"); null for a question asked on its own.';
COMMENT ON COLUMN questions.custom_prompt IS
    'The asker''s additional instructions to the engine, if any.';
COMMENT ON COLUMN questions.answer_detail_level IS
    'How long an answer the engine writes: 0 low, 1 normal (the default), 2 high. The API takes the number when asking and shows the name (low, normal, high) in a question.';
COMMENT ON COLUMN questions.context IS
    'Set at ready_to_answer: the RFP''s context (rfps.context) at that moment.';
COMMENT ON COLUMN questions."references" IS
    'Set at references_fetched: the entries retrieved, [{kb_item_id, score, kb_version, …, used}]; used marks those the answer drew on.';
COMMENT ON COLUMN questions.draft_answer IS
    'Set at answered: the engine''s text before confidence is calculated.';
COMMENT ON COLUMN questions.verbatim_answer IS
    'true: the answer is a knowledge-base entry''s answer unchanged.';
COMMENT ON COLUMN questions.sufficient_context IS
    'Whether the engine found enough in the knowledge base to answer; null until answered.';
COMMENT ON COLUMN questions.engine_points IS
    'What the engine says to check in its answer.';
COMMENT ON COLUMN questions.engine_failure IS
    'Why the engine gave up, if it did; such a question completes needing attention and its credits are refunded.';
COMMENT ON COLUMN questions.confidence IS
    'Confidence in the answer, 0 to 1; null until confidence_calculated.';
COMMENT ON COLUMN questions.requires_attention IS
    'true: a person should check the answer (attention_points say why).';
COMMENT ON COLUMN questions.answer IS
    'The published answer; set at complete.';
COMMENT ON COLUMN questions.charged_credits IS
    'Credits debited when the question was asked (0 when free).';
COMMENT ON COLUMN questions.refunded IS
    'true once charged_credits were given back (an engine failure); guards against refunding twice.';
COMMENT ON COLUMN questions.idempotency_key IS
    'The Idempotency-Key header of the ask, unique per member_id; null without one.';
COMMENT ON COLUMN questions.request_hash IS
    'SHA-256 of the normalised ask (question, custom prompt, detail level): a key reused for a different question is refused.';
COMMENT ON COLUMN questions.lease_owner IS
    'The pipeline working on the question, as host:pid:random; null when no process holds it. Only the owner may advance the question.';
COMMENT ON COLUMN questions.lease_expires_at IS
    'When the lease lapses and any process may claim the question; with lease_owner null (released after a failure), the earliest moment it may be claimed again. Null before the first claim and once complete.';
COMMENT ON COLUMN questions.attempts IS
    'How many times a pipeline took the question (each claim, or being asked straight into the asker''s pipeline, counts one), failed or not.';
COMMENT ON COLUMN questions.failed_attempts IS
    'How many times a step failed unexpectedly (not counting claims); at questions.max_failed_attempts the question completes needing attention and is refunded.';

-- -- knowledge base -----------------------------------------------------------------------------

COMMENT ON TABLE knowledge_items IS
    'The knowledge base (id kb_…): the entries questions are answered from. Every change keeps the entry as it was in knowledge_item_versions (trigger knowledge_items_versioning), and keeps knowledge_terms and knowledge_stats in step.';
COMMENT ON COLUMN knowledge_items.question IS
    'The question this entry answers, if known; weighs most in search.';
COMMENT ON COLUMN knowledge_items.answer IS
    'The answer, or free-text content.';
COMMENT ON COLUMN knowledge_items.source IS
    'Where the entry came from (document, URL …), as given.';
COMMENT ON COLUMN knowledge_items.external_id IS
    'The importer''s own id (the CSV id column), unique per account when set.';
COMMENT ON COLUMN knowledge_items.yes_no IS
    'The questionnaire''s own Yes/No for the entry (CSV yes_no column): true Yes, false No, null none. An answer to a yes/no question is led by it.';
COMMENT ON COLUMN knowledge_items.reviewed_question IS
    'The question (questions.id, q_…) a review saved this entry for; reviewing it again updates this entry instead of adding one.';
COMMENT ON COLUMN knowledge_items.search_vector IS
    'Generated: the question (weight A), title (B) and answer (C) as English lexemes, for retrieval.';
COMMENT ON COLUMN knowledge_items.owner_member_id IS
    'The member who keeps the entry right: a members.id (mbr_…), not a users.id; the API calls it owner_id. null: no owner.';
COMMENT ON COLUMN knowledge_items.review_by IS
    'Past this date the entry is stale: answers drawn from it ask for attention. New entries get today + library_settings.review_period_days.';
COMMENT ON COLUMN knowledge_items.reviewed_at IS
    'When someone last confirmed the entry is still right.';
COMMENT ON COLUMN knowledge_items.version IS
    'The entry''s version, from 1, raised by every change a reader can see; earlier ones are in knowledge_item_versions.';
COMMENT ON COLUMN knowledge_items.updated_by IS
    'The member (members.id, mbr_…) who wrote this version; null: the system or an operator.';

COMMENT ON TABLE knowledge_item_versions IS
    'Every earlier version of a knowledge entry: the entry as it was at version, written by written_by at written_at, replaced by replaced_by at replaced_at. No foreign key to knowledge_items: the history outlives a deleted or merged entry.';
COMMENT ON COLUMN knowledge_item_versions.item_id IS
    'The entry (knowledge_items.id, kb_…), which may no longer exist.';
COMMENT ON COLUMN knowledge_item_versions.owner_member_id IS
    'As knowledge_items.owner_member_id: a members.id (mbr_…).';
COMMENT ON COLUMN knowledge_item_versions.written_by IS
    'The member (members.id) who wrote this version; null: the system or an operator.';
COMMENT ON COLUMN knowledge_item_versions.written_at IS
    'When this version was written.';
COMMENT ON COLUMN knowledge_item_versions.replaced_by IS
    'The member (members.id) whose change replaced this version; null: the system or an operator.';
COMMENT ON COLUMN knowledge_item_versions.change IS
    'What replaced this version: updated, deleted, or merged (into another entry).';

COMMENT ON TABLE knowledge_terms IS
    'Per account, how many entries contain each lexeme (document frequency), kept by triggers on knowledge_items: retrieval ranks a question against the entries holding its rarest lexemes.';
COMMENT ON COLUMN knowledge_terms.lexeme IS
    'An English-stemmed lexeme of search_vector.';
COMMENT ON COLUMN knowledge_terms.df IS
    'How many of the account''s entries contain the lexeme.';

COMMENT ON TABLE knowledge_stats IS
    'Per account, how many knowledge entries it has (the N of inverse document frequency), kept by triggers on knowledge_items.';
COMMENT ON COLUMN knowledge_stats.items IS
    'The account''s knowledge entries.';

COMMENT ON TABLE knowledge_vocabulary IS
    'Synonym phrases of security and compliance: a question containing any phrase of a concept is also matched against its other phrases. Seeded rows are synced from sql/vocabulary.toml at every migrate; operators add their own (docs/answer-quality.md).';
COMMENT ON COLUMN knowledge_vocabulary.account_id IS
    'null: applies to every account; else to that account only.';
COMMENT ON COLUMN knowledge_vocabulary.concept IS
    'The concept the phrase names (e.g. mfa); phrases of one concept are synonyms.';
COMMENT ON COLUMN knowledge_vocabulary.phrase_query IS
    'Generated: the phrase as a tsquery of adjacent lexemes; empty (matches nothing) when it is stop words only.';
COMMENT ON COLUMN knowledge_vocabulary.seeded IS
    'true: from sql/vocabulary.toml, replaced by the sync at every migrate; false: an operator''s row, never touched.';

COMMENT ON TABLE knowledge_embedding_claims IS
    'The embeddings indexer''s claims: an entry being embedded for a model by one process is not embedded by another meanwhile.';
COMMENT ON COLUMN knowledge_embedding_claims.model IS
    'The embedding model''s name (config embeddings.model).';
COMMENT ON COLUMN knowledge_embedding_claims.claimed_until IS
    'The claim lapses then, so the entries of a process that died are taken up by another.';

COMMENT ON TABLE library_settings IS
    'One row: the review period new knowledge entries get, written by the service at start-up from config library.review_period_days.';
COMMENT ON COLUMN library_settings.singleton IS
    'Always true: the primary key that keeps the table to one row.';
COMMENT ON COLUMN library_settings.review_period_days IS
    'Days from creation (or review) to an entry''s review_by.';

COMMENT ON TABLE knowledge_duplicate_runs IS
    'Per account, the last duplicate/conflict detection run (background; a run replaces the account''s knowledge_duplicates rows).';
COMMENT ON COLUMN knowledge_duplicate_runs.started_at IS
    'When the last run started; a run that started under a minute ago and has not finished blocks another.';
COMMENT ON COLUMN knowledge_duplicate_runs.computed_at IS
    'When the last run finished; null while the first run is under way.';
COMMENT ON COLUMN knowledge_duplicate_runs.entries IS
    'Entries compared by the last run.';
COMMENT ON COLUMN knowledge_duplicate_runs.seconds IS
    'How long the last run took, in seconds.';

COMMENT ON TABLE knowledge_duplicates IS
    'Pairs of knowledge entries found near-duplicate or conflicting by the last run for the account. No foreign keys: a pair whose entry was deleted stays until the next run, and is not listed.';
COMMENT ON COLUMN knowledge_duplicates.item_a IS
    'The pair''s entry (knowledge_items.id, kb_…) whose id sorts first.';
COMMENT ON COLUMN knowledge_duplicates.item_b IS
    'The pair''s other entry (knowledge_items.id), whose id sorts after item_a.';
COMMENT ON COLUMN knowledge_duplicates.kind IS
    'duplicate (near-identical questions or answers) or conflict (similar questions answered Yes by one and No by the other, or with different numbers of one unit).';
COMMENT ON COLUMN knowledge_duplicates.reason IS
    'The finding in words, for people.';
COMMENT ON COLUMN knowledge_duplicates.similarity IS
    'Trigram similarity of the two questions (or answers), 0 to 1.';

-- -- webhooks -----------------------------------------------------------------------------------

COMMENT ON TABLE webhook_endpoints IS
    'An account''s receivers of webhooks (id whep_…).';
COMMENT ON COLUMN webhook_endpoints.event_types IS
    'The event types sent to this endpoint (question.completed, rfp.answered, …).';
COMMENT ON COLUMN webhook_endpoints.secret IS
    'The signing secret (whsec_…, Standard Webhooks), in clear because signing needs it: secret. The API shows it only when the endpoint is created.';
COMMENT ON COLUMN webhook_endpoints.enabled IS
    'false: nothing is queued for or delivered to the endpoint; pending deliveries wait.';
COMMENT ON COLUMN webhook_endpoints.disabled_reason IS
    'Why the service disabled the endpoint (a delivery failed past its retry window); null when enabled or disabled by an admin.';

COMMENT ON TABLE webhook_events IS
    'The webhook outbox: one row per event, written in the transaction of the change it reports. Pruned with its deliveries after webhooks.keep_days once every delivery has finished.';
COMMENT ON COLUMN webhook_events.id IS
    'msg_…: the webhook-id header, the same on every attempt (receivers deduplicate by it).';
COMMENT ON COLUMN webhook_events.record_id IS
    'The record the event is about; deliveries for one record go in order.';
COMMENT ON COLUMN webhook_events.body IS
    'The JSON sent and signed, exactly.';

COMMENT ON TABLE webhook_deliveries IS
    'One event to one endpoint, and the outcome of its last attempt (the API''s delivery log).';
COMMENT ON COLUMN webhook_deliveries.record_id IS
    'Copied from the event: a delivery waits while an earlier one for the same endpoint and record is pending.';
COMMENT ON COLUMN webhook_deliveries.attempts IS
    'Attempts so far (each claim counts one).';
COMMENT ON COLUMN webhook_deliveries.next_attempt_at IS
    'When a pending delivery is due; while a deliverer holds it, the end of its lease.';
COMMENT ON COLUMN webhook_deliveries.retry_until IS
    'Set by the first attempt (+ webhooks.retry_for_seconds): a failure that would retry past it fails the delivery and disables the endpoint.';
COMMENT ON COLUMN webhook_deliveries.last_status IS
    'The HTTP status of the last attempt; null when it got none (connection error, timeout).';
COMMENT ON COLUMN webhook_deliveries.last_response IS
    'The start of the last response body (up to webhooks.max_response_bytes).';

-- -- migrations ---------------------------------------------------------------------------------

COMMENT ON TABLE schema_migrations IS
    'The migrations applied (sql/migrations/<version>.sql), each with the SHA-256 of its file when applied: a changed or missing file stops start-up.';
COMMENT ON COLUMN schema_migrations.checksum IS
    'SHA-256 (hex) of the migration file as applied; null only until migrate fills it in for a migration applied before checksums were stored.';

-- -- dense retrieval (only where pgvector was found: migration 0011) --------------------------
-- The same comments are given by sql/queries/migrate.sql (create_embeddings_table) when pgvector
-- is installed later and the table is made then: keep the two in step.
DO $comments$
BEGIN
    IF to_regclass('knowledge_embeddings') IS NULL THEN
        RETURN;
    END IF;
    COMMENT ON TABLE knowledge_embeddings IS
        'Dense retrieval: one vector per knowledge entry and embedding model, written by the embeddings indexer. Only where pgvector is installed.';
    COMMENT ON COLUMN knowledge_embeddings.model IS
        'The embedding model''s name (config embeddings.model).';
    COMMENT ON COLUMN knowledge_embeddings.account_id IS
        'The entry''s account, copied so that a search never joins to find it.';
    COMMENT ON COLUMN knowledge_embeddings.content_hash IS
        'md5 (hex) of the text embedded (question, title and answer): when the entry''s differs, it is embedded again.';
    COMMENT ON COLUMN knowledge_embeddings.dimensions IS
        'The vector''s length; an HNSW index exists per dimension (384 for all-MiniLM-L6-v2).';
END
$comments$;
