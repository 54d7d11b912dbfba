"""The operator CLI, run as `python -m service …` subprocesses against the per-test database."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from cli_runner import cli, cli_json
from conftest import ROOT, with_config

from service.domain.tokens import hash_token


@pytest.fixture
def account(database_url: str) -> dict:
    return cli_json(
        database_url, "account", "create", "--name", "Acme", "--admin-email", "boss@acme.test",
        "--credits", "25",
    )


async def test_account_create__json_has_account_member_and_token(database_url, conn, account):
    assert set(account) == {"account", "member", "token"}
    assert set(account["account"]) == {"id", "name", "credits"}
    assert account["account"]["id"].startswith("acct_")
    assert account["account"]["name"] == "Acme"
    assert account["account"]["credits"] == 25
    assert set(account["member"]) == {"id", "user_id", "email", "role"}
    assert account["member"]["id"].startswith("mbr_")
    assert account["member"]["email"] == "boss@acme.test"
    assert account["member"]["role"] == "admin"
    assert isinstance(account["member"]["user_id"], int)
    assert account["token"].startswith("rfpk_")
    scopes = await conn.fetchval(
        "SELECT scopes FROM api_tokens WHERE token_hash = $1", hash_token(account["token"])
    )
    assert scopes == ["read", "write"]
    assert await conn.fetchval("SELECT credits FROM accounts WHERE id = $1", account["account"]["id"]) == 25


async def test_member_create__json_and_stored_role(database_url, conn, account):
    out = cli_json(
        database_url, "member", "create", "--account", account["account"]["id"],
        "--email", "eve@acme.test", "--role", "viewer",
    )
    assert out["member"]["role"] == "viewer"
    assert out["member"]["email"] == "eve@acme.test"
    role = await conn.fetchval("SELECT role::text FROM members WHERE id = $1", out["member"]["id"])
    assert role == "viewer"


async def test_token_create__json_token_with_the_asked_scopes(database_url, conn, account):
    out = cli_json(
        database_url, "token", "create", "--account", account["account"]["id"],
        "--email", "boss@acme.test", "--scopes", "read",
    )
    assert set(out) == {"token"}
    scopes = await conn.fetchval(
        "SELECT scopes FROM api_tokens WHERE token_hash = $1", hash_token(out["token"])
    )
    assert scopes == ["read"]


async def test_credits_add_and_subscription_set__change_the_account(database_url, conn, account):
    account_id = account["account"]["id"]
    assert cli(database_url, "credits", "add", "--account", account_id, "--amount", "5").returncode == 0
    result = cli(database_url, "subscription", "set", "--account", account_id, "--status", "inactive")
    assert result.returncode == 0
    row = await conn.fetchrow(
        "SELECT credits, subscription_status::text AS status FROM accounts WHERE id = $1", account_id
    )
    assert (row["credits"], row["status"]) == (30, "inactive")
    ledger = await conn.fetchval("SELECT sum(amount) FROM credit_ledger WHERE account_id = $1", account_id)
    assert ledger == 30


async def test_housekeeping__one_sweep_now_says_what_it_deleted(database_url, conn):
    await conn.execute("INSERT INTO rate_limit_buckets VALUES"
                       " ('sign_in:email:x', 1, now() - interval '2 days'), ('sign_in:email:y', 1, now())")
    out = cli_json(database_url, "housekeeping")
    assert out["deleted"] == {"webhook_events": 0, "rate_limit_buckets": 1, "web_sessions": 0,
                              "mail": 0, "links": 0, "import_reports": 0}
    kept = await conn.fetchval("SELECT array_agg(bucket_key) FROM rate_limit_buckets")
    assert kept == ["sign_in:email:y"]


async def test_credits_add__refuses_overdraft_and_zero(database_url, conn, account):
    account_id = account["account"]["id"]
    for amount in ("-26", "0"):
        result = cli(database_url, "credits", "add", "--account", account_id, "--amount", amount)
        assert result.returncode == 1
        assert result.stderr.startswith("error: ")
        assert "Traceback" not in result.stderr
    assert await conn.fetchval("SELECT credits FROM accounts WHERE id = $1", account_id) == 25


async def test_rfp_create__json_id_of_a_stored_rfp(database_url, conn, account):
    out = cli_json(
        database_url, "rfp", "create", "--account", account["account"]["id"],
        "--owner-email", "boss@acme.test", "--title", "Acme review", "--description", "Annual",
        "--framework", "cjis-6", "--deadline", "2030-01-31", "--context", "bid",
    )
    assert set(out) == {"id"}
    assert out["id"].startswith("rfp_")
    row = await conn.fetchrow("SELECT * FROM rfps WHERE id = $1", out["id"])
    assert (row["title"], row["description"], row["framework"], str(row["deadline"]), row["context"]) == (
        "Acme review", "Annual", "cjis-6", "2030-01-31", "bid",
    )
    assert row["owner_id"] == account["member"]["user_id"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["member", "create", "--account", "acct_nope", "--email", "a@b.test", "--role", "member"],
         "no account acct_nope"),
        (["token", "create", "--account", "{account}", "--email", "who@acme.test"],
         "who@acme.test is not a member"),
        (["token", "create", "--account", "{account}", "--email", "boss@acme.test", "--scopes", "admin"],
         "scopes must be some of read, write"),
        (["rfp", "create", "--account", "{account}", "--owner-email", "boss@acme.test",
          "--title", "x", "--framework", "iso"], "framework: must be one of"),
        (["member", "create", "--account", "{account}", "--email", "boss@acme.test", "--role", "member"],
         "already a member"),
    ],
)
def test_operator_errors__exit_1_with_message_and_empty_stdout(database_url, account, args, message):
    args = [a.replace("{account}", account["account"]["id"]) for a in args]
    result = cli(database_url, *args, "--json")
    assert result.returncode == 1
    assert result.stdout == ""
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_database__exit_2_naming_the_setting():
    result = cli("postgresql://nobody@127.0.0.1:1/none", "migrate")
    assert result.returncode == 2
    assert "database.url: cannot connect" in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_database__a_password_in_the_url_query_is_not_shown():
    # A probe: `?password=` (as libpq takes it) was printed whole in the error line.
    result = cli("postgresql://nobody@127.0.0.1:1/none?password=hunter2&sslmode=disable", "migrate")
    assert result.returncode == 2
    assert result.stderr == ("error: database.url: cannot connect to postgresql://nobody@127.0.0.1:1/none"
                             "?sslmode=disable: [Errno 111] Connect call failed ('127.0.0.1', 1)\n")


def test_unreachable_direct_url__names_that_setting_and_server(database_url):
    # A probe: behind a pooler with direct_url set, commands connect to direct_url, yet the error
    # named database.url and the pooler's address, which was fine.
    result = cli(database_url, "migrate", env={
        "RFP_DATABASE_POOLER": "pgbouncer-transaction",
        "DATABASE_DIRECT_URL": "postgresql://nobody:secret@127.0.0.1:1/none"})
    assert result.returncode == 2
    assert result.stderr.startswith(
        "error: database.direct_url: cannot connect to postgresql://nobody@127.0.0.1:1/none: ")


def test_interrupted__one_line_exit_130_no_traceback():
    """A probe: Ctrl-C while a command waits on the database printed a KeyboardInterrupt
    traceback. The server here accepts the connection and never answers, so `migrate` waits."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"postgresql://nobody@127.0.0.1:{server.getsockname()[1]}/none"
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", "migrate"],
            env={**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": url},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        server.settimeout(60)
        accepted, _ = server.accept()  # the command is past its imports, waiting on us
        with accepted:
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert stderr == "error: interrupted\n"


# -- serve ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_serve(env: dict, *args: str, cwd: Path = ROOT) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "service", "serve", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until_serving(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the service did not start")


def interrupt(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def api(port: int, path: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, json.loads(response.read())


def read_demo_block(proc: subprocess.Popen) -> tuple[str, str]:
    """The first-start block's token and text, printed before the service listens."""
    lines: list[str] = []
    while sum("curl " in line for line in lines) < 2:
        line = proc.stdout.readline()
        assert line, "no demo block printed: " + "".join(lines)
        lines.append(line)
    tokens = [m.group(1) for line in lines if (m := re.fullmatch(r"\s+(rfpk_\w+)\s*", line))]
    assert len(tokens) == 1, lines
    return tokens[0], "".join(lines)


@pytest.mark.slow
def test_serve__first_start_prints_a_working_demo_token_and_stops_on_ctrl_c(empty_database_url):
    port = free_port()
    proc = start_serve({"DATABASE_URL": empty_database_url, "PORT": str(port)})
    try:
        token, printed = read_demo_block(proc)
        wait_until_serving(port, proc)
        status, created = api(port, "/api/v1/rfps", token, {"rfp": {"title": "Acme"}})
        status_search, found = api(port, "/api/v1/rfps/search?query=acme", token)
        # The printed password signs in (the web app's and POST /api/v1/tokens' rule).
        password = re.search(r"with the password (\S+)", printed).group(1)
        status_sign_in, _ = api(
            port, "/api/v1/tokens", "", {"email": "admin@example.com", "password": password}
        )
    finally:
        _, stderr = interrupt(proc)
    assert proc.returncode == 0, stderr
    assert re.search(rf"INFO service: listening on http://127\.0\.0\.1:{port} \(pid \d+\)\n", stderr), stderr
    assert (status, status_search, status_sign_in) == (201, 200, 201)
    assert [rfp["id"] for rfp in found["rfps"]] == [created["id"]]
    assert printed.count("curl ") == 2
    assert f"http://localhost:{port}/signin" in printed
    assert f"http://localhost:{port}/api/v1/rfps" in printed


@pytest.mark.slow
def test_serve__port_option_is_the_port_of_web_links(empty_database_url):
    """A probe: `serve --port 9000` without server.web_base_url made every web_link (and e-mailed
    link) http://localhost:8080/…, the port of the config, while PORT=9000 made them :9000."""
    port = free_port()
    proc = start_serve({"DATABASE_URL": empty_database_url, "RFP_EMBEDDINGS": "none"}, "--port", str(port))
    try:
        token, _ = read_demo_block(proc)
        wait_until_serving(port, proc)
        _, created = api(port, "/api/v1/rfps", token, {"rfp": {"title": "Acme"}})
    finally:
        interrupt(proc)
    assert created["web_link"] == f"http://localhost:{port}/rfps/{created['id']}"


@pytest.mark.slow
def test_serve__second_start_creates_no_second_demo(empty_database_url):
    port = free_port()
    outputs = []
    for _ in range(2):
        proc = start_serve({"DATABASE_URL": empty_database_url, "PORT": str(port)})
        try:
            wait_until_serving(port, proc)
        finally:
            outputs.append(interrupt(proc)[0])
    assert ["rfpk_" in out for out in outputs] == [True, False]


def listeners(parent: int, port: int) -> list[int]:
    """The pids of `parent`'s child processes listening on `port`."""
    return [
        child.pid
        for child in psutil.Process(parent).children()
        if any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in child.net_connections())
    ]


@pytest.mark.slow
def test_serve__workers_2_serves_from_two_processes_on_one_port(empty_database_url):
    port = free_port()
    proc = start_serve({"DATABASE_URL": empty_database_url}, "--port", str(port), "--workers", "2")
    try:
        wait_until_serving(port, proc)
        deadline = time.monotonic() + 30
        while len(listening := listeners(proc.pid, port)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # the second worker may still be starting
        assert len(listening) == 2
        assert proc.pid not in listening
    finally:
        _, stderr = interrupt(proc)
    assert proc.returncode == 0, stderr
    assert not any(psutil.pid_exists(pid) for pid in listening)


@pytest.mark.slow
def test_serve__embedded_postgres_starts_and_ctrl_c_stops_it(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--port", str(port)],
        env={**env, "PYTHONPATH": str(ROOT), "RFP_DATA_DIR": str(tmp_path / "var")},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(port, proc, timeout=120)
        pid_file = tmp_path / "var" / "pg" / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])
        assert psutil.pid_exists(postmaster)
    finally:
        stdout, stderr = interrupt(proc)
    assert proc.returncode == 0, stderr
    assert "rfpk_" in stdout
    assert not pid_file.exists()
    assert not psutil.pid_exists(postmaster) or psutil.Process(postmaster).status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow
def test_serve__embedded_postgres_stopped_on_ctrl_c_after_a_kill_9(tmp_path):
    """A probe: after a service was killed with SIGKILL, its embedded PostgreSQL ran on, and no
    later start stopped it on Ctrl-C (the wheel still counted the dead process as a user of it),
    while each logged "embedded PostgreSQL stopped"."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env = {**env, "PYTHONPATH": str(ROOT), "RFP_DATA_DIR": str(tmp_path / "var"), "RFP_EMBEDDINGS": "none"}
    pid_file = tmp_path / "var" / "pg" / "postmaster.pid"
    port = free_port()
    killed = subprocess.Popen([sys.executable, "-m", "service", "serve", "--port", str(port)],
                              env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_serving(port, killed, timeout=120)
    finally:
        killed.kill()
        killed.wait()
    postmaster = int(pid_file.read_text().split()[0])
    assert psutil.pid_exists(postmaster)  # a crash leaves the server running; the next start uses it
    proc = start_serve(env, "--port", str(port), cwd=tmp_path)
    try:
        wait_until_serving(port, proc, timeout=120)
        assert int(pid_file.read_text().split()[0]) == postmaster
    finally:
        _, stderr = interrupt(proc)
    assert proc.returncode == 0, stderr
    deadline = time.monotonic() + 10
    while psutil.pid_exists(postmaster) and psutil.Process(postmaster).status() != psutil.STATUS_ZOMBIE:
        if time.monotonic() > deadline:
            psutil.Process(postmaster).terminate()
            raise AssertionError("the embedded PostgreSQL still runs after Ctrl-C")
        time.sleep(0.1)


def serve_on_a_taken_port(database_url: str, *args: str) -> tuple[int, int, str, str]:
    """`serve` on a port another socket listens on: (the port, the exit code, stdout, stderr)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_serve({"DATABASE_URL": database_url}, "--port", str(port), *args)
        stdout, stderr = proc.communicate(timeout=60)
    return port, proc.returncode, stdout, stderr


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
async def test_serve__a_taken_port_is_one_error_line_and_exit_2_before_any_demo_account(
    database_url, conn, workers,
):
    """A probe: the port in use ended start-up in a 25-line traceback (exit 1); then, on a first
    start, only after the demo account was made and its token printed for a service that never
    ran (the README walk-through). With workers, each died and the supervisor said so."""
    port, returncode, stdout, stderr = serve_on_a_taken_port(database_url, "--workers", workers)
    assert returncode == 2
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: server.port: cannot listen on 127.0.0.1:{port}: address already in use"]
    assert "Traceback" not in stderr
    assert "listening on" not in stderr
    assert "First start" not in stdout and "rfpk_" not in stdout
    assert await conn.fetchval("SELECT count(*) FROM accounts") == 0


@pytest.mark.slow
def test_serve__a_worker_that_dies_stops_the_others_and_exit_1(database_url):
    """When one of the workers dies on its own, the others are stopped too: the service never
    runs short of workers without saying so."""
    port = free_port()
    proc = start_serve({"DATABASE_URL": database_url, "RFP_EMBEDDINGS": "none"},
                       "--port", str(port), "--workers", "2")
    try:
        wait_until_serving(port, proc)
        # The spawned workers (multiprocessing's resource tracker is a child too).
        workers = [child for child in psutil.Process(proc.pid).children()
                   if "spawn_main" in " ".join(child.cmdline())]
        assert len(workers) == 2
        workers[0].kill()
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert f"worker {workers[0].pid} exited with code -9; stopping the others" in stderr
    assert not any(worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE for worker in workers)


@pytest.mark.slow
def test_serve__a_host_that_does_not_resolve_is_one_error_line_and_exit_2(database_url):
    """A probe: `serve --host` with a name the resolver does not know ended in a traceback
    (socket.gaierror, exit 1)."""
    port = free_port()
    proc = start_serve({"DATABASE_URL": database_url, "RFP_EMBEDDINGS": "none"},
                       "--host", "no-such-host.invalid", "--port", str(port))
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: server.host: cannot listen on no-such-host.invalid:{port}: "
                      "name or service not known"]
    assert "Traceback" not in stderr


def test_psql__runs_the_bundled_psql_on_the_configured_database(database_url):
    result = cli(database_url, "psql", "-tA", "-c", "SELECT count(*) FROM schema_migrations")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(len(list((ROOT / "sql" / "migrations").glob("*.sql"))))


@pytest.mark.slow
def test_serve__connections_refused_at_start_up_are_one_error_line_and_exit_2(server_url, empty_database_url):
    """A probe: a role allowed fewer connections than a process opens at start (a managed
    server's per-role limit) migrated, then ended in a 60-line traceback from opening the pools."""
    import asyncio

    import asyncpg
    from yarl import URL

    role = f"rfp_limited_{secrets.token_hex(4)}"

    async def admin(url: str, *statements: str) -> None:
        conn = await asyncpg.connect(url)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    name = URL(empty_database_url).path.lstrip("/")
    asyncio.run(admin(empty_database_url, f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 1',
                      f'ALTER DATABASE "{name}" OWNER TO "{role}"', f'ALTER SCHEMA public OWNER TO "{role}"'))
    try:
        result = cli(str(URL(empty_database_url).with_user(role)), "serve", "--port", str(free_port()),
                     env={"RFP_EMBEDDINGS": "none"})
    finally:
        asyncio.run(admin(empty_database_url, f'REASSIGN OWNED BY "{role}" TO CURRENT_USER',
                          f'DROP OWNED BY "{role}"'))
        asyncio.run(admin(server_url, f'DROP ROLE "{role}"'))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    where = URL(empty_database_url).with_user(role).with_password(None)  # no password shown
    assert errors == [
        f"error: database.url: cannot open the service's connections to {where}: too many connections "
        f'for role "{role}" (each service process holds up to database.pool_max_size + '
        "questions.pool_size + 1)"]


def test_serve__pgbouncer_refusing_the_password_is_named_with_where_and_what_to_check(capsys):
    # PgBouncer's whole word for a wrong password or a user missing from its auth_file (08P01), as
    # an operator met it when database.url's password was wrong and direct_url's right: neither
    # the server nor what to check was named.
    import asyncpg

    from service import config as config_module
    from service.server import _cannot_connect

    config = config_module.structure({"database": {
        "url": "postgresql://rfp_app:secret@pgbouncer.internal:6432/rfp",
        "pooler": "pgbouncer-transaction", "direct_url": "postgresql://rfp_app:x@postgres.internal/rfp"}})
    with pytest.raises(SystemExit) as exited:
        _cannot_connect(config, asyncpg.ProtocolViolationError("SASL authentication failed"))
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: database.url: cannot open the service's connections to "
        "postgresql://rfp_app@pgbouncer.internal:6432/rfp: SASL authentication failed (the user or "
        "password in database.url; behind PgBouncer, the user must be in its auth_file with that "
        "password's SCRAM secret)"]


# -- a closed stdout ----------------------------------------------------------------------

# `migrate`'s handler replaced by one that writes a line, then `BREAK` (run in the CLI's process).
_PATCHED_CLI = """
import socket, sys
from service import cli

def handler(args, config):
    print("before")
{BREAK}
    return 0

cli.cmd_migrate = handler
sys.exit(cli.main(["migrate"]))
"""


def _patched_cli(breaking: str, **popen) -> subprocess.Popen:
    script = _PATCHED_CLI.replace("{BREAK}", "\n".join("    " + line for line in breaking.splitlines()))
    return subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen})


def test_closed_stdout__exit_1_without_a_traceback():
    """`… | head`: the reader takes a line and closes the pipe while the command still writes."""
    proc = _patched_cli("for n in range(100_000):\n    print('line', n)")
    assert proc.stdout.readline() == b"before\n"
    proc.stdout.close()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert stderr == b""


def test_broken_pipe_not_on_stdout__is_not_hidden():
    """A BrokenPipeError from anything but stdout (here a socket whose peer closed) is the
    command's failure, shown with its traceback, not a reader of stdout gone away: the handler
    took every one for a closed stdout, exited 1 in silence and threw away what stdout held."""
    proc = _patched_cli("mine, theirs = socket.socketpair()\ntheirs.close()\nmine.sendall(b'x')")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert stdout == b"before\n"
    assert b"Traceback" in stderr and b"BrokenPipeError" in stderr, stderr.decode()


def test_no_stdout_at_all__a_command_that_succeeds_exits_0():
    """Started with its stdout closed (`>&-`, a daemon's child), Python has no sys.stdout (None)
    and print() writes nothing: the command's success is 0, where flushing stdout after it raised
    AttributeError and made it 1 with a traceback."""
    proc = _patched_cli("pass", stdout=None, preexec_fn=lambda: os.close(1))
    _, stderr = proc.communicate(timeout=60)
    assert (proc.returncode, stderr) == (0, b"")


async def test_serve__demo_account_false_migrates_and_makes_no_demo_account(
    empty_database_url, config, capsys,
):
    """helper-91's walk of DEPLOYMENT.md: a production database's first start made a demo account
    (admin@example.com, a password) and printed its token and password into the host's log, with
    http://localhost:PORT links whatever web_base_url said. Now `server.demo_account = false`
    makes none, and the demo's links follow web_base_url."""
    import asyncpg

    from service import cli as service_cli

    # The empty database on the server itself (in the PgBouncer pass too: config's direct_url
    # would otherwise be where the migrations go).
    config = with_config(config, database={"url": empty_database_url, "pooler": "none", "direct_url": ""})
    off = with_config(config, server={"demo_account": False})
    assert await service_cli.bootstrap_demo(empty_database_url, off) is None
    conn = await asyncpg.connect(empty_database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM accounts") == 0  # migrated, no account
    finally:
        await conn.close()

    on = with_config(config, server={"web_base_url": "https://rfp.example.org/"})
    demo = await service_cli.bootstrap_demo(empty_database_url, on)
    assert demo is not None
    service_cli.print_demo(demo, on)
    printed = capsys.readouterr().out
    assert "https://rfp.example.org/signin as admin@example.com" in printed
    assert "https://rfp.example.org/api/v1/rfps " in printed
    assert "localhost" not in printed
