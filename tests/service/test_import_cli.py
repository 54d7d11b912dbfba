"""The operator CLI: `rfp import`, `rfp export` and `kb import`."""

from __future__ import annotations

import csv
import json

from cli_runner import POOLER_ENV
from openpyxl import load_workbook

from service.cli import main


def run(capsys, *argv: str) -> tuple[int, dict | str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    out = captured.out.strip()
    return code, (json.loads(out) if "--json" in argv and code == 0 else captured.err)


def test_cli_rfp_import_and_export__round_trip(database_url, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("DATABASE_URL", database_url)
    for name, value in POOLER_ENV.items():  # the PgBouncer pass: told, as an operator tells it
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RFP_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    _, made = run(capsys, "account", "create", "--name", "Acme", "--admin-email", "a@acme.test", "--json")
    account = made["account"]["id"]
    _, rfp = run(capsys, "rfp", "create", "--account", account, "--owner-email", "a@acme.test",
                 "--title", "CLI review", "--json")
    questionnaire = tmp_path / "q.csv"
    questionnaire.write_bytes("\ufeffControl,Requirement\nAC-1,Describe access control.\nAC-2,\n".encode())

    code, report = run(capsys, "rfp", "import", "--account", account, "--rfp", rfp["id"],
                       str(questionnaire), "--json")
    assert code == 0
    assert report["import"]["imported"] == 1
    assert report["import"]["question_column"] == "Requirement"
    assert report["import"]["skipped"] == [{"row": 3, "reason": "blank question"}]

    output = tmp_path / "out.csv"
    code, exported = run(capsys, "rfp", "export", "--account", account, "--rfp", rfp["id"],
                         "--format", "csv", "--output", str(output), "--json")
    assert code == 0 and exported["items"] == 1
    rows = list(csv.reader(output.open(newline="")))
    assert rows[1] == ["Describe access control.", "", "pending", "", ""]
    workbook = tmp_path / "out.xlsx"
    code, exported = run(capsys, "rfp", "export", "--account", account, "--rfp", rfp["id"],
                         "--format", "xlsx", "--output", str(workbook), "--json")
    assert code == 0 and exported["items"] == 1
    sheet = load_workbook(workbook).active
    assert [cell.value for cell in sheet[2]] == ["Describe access control.", None, "pending", None, None]


def test_cli_rfp_import__no_question_column_names_columns(database_url, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("RFP_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    bad = tmp_path / "bad.csv"
    bad.write_text("ID,Answer\n1,yes\n")
    code, err = run(capsys, "rfp", "import", "--account", "acct_x", "--rfp", "rfp_x", str(bad), "--json")
    assert code == 1
    assert "no question column" in err and "'ID', 'Answer'" in err


def test_cli_kb_import__a_file_past_the_configs_limits_is_refused_unread(
    database_url, monkeypatch, capsys, tmp_path
):
    """Finding (helper-95's probe): `kb import` read the whole file, then parsed it with the
    default upload limits rather than the config's: a 400 MB CSV grew the CLI to 2.4 GB before
    its 10,001st row was refused (on the service's host, whose memory it shares; `rfp import` of
    the same file: 60 MB). It reads at most `server.max_upload_bytes`, as the API does, and
    parses with `[uploads]`."""
    monkeypatch.setenv("DATABASE_URL", database_url)
    for name, value in POOLER_ENV.items():  # the PgBouncer pass: told, as an operator tells it
        monkeypatch.setenv(name, value)
    config = tmp_path / "limits.toml"
    config.write_text("[server]\nmax_upload_bytes = 1000\n[uploads]\nmax_cell_chars = 50\n")
    monkeypatch.setenv("RFP_CONFIG", str(config))
    _, made = run(capsys, "account", "create", "--name", "Acme", "--admin-email", "a@acme.test", "--json")
    account = made["account"]["id"]
    large = tmp_path / "large.csv"
    large.write_text("question,answer\n" + "Retention?,Thirty days.\n" * 50)  # 1,266 bytes
    code, err = run(capsys, "kb", "import", "--account", account, str(large))
    assert code == 1 and "server.max_upload_bytes" in err and "1,000 bytes" in err
    long_cell = tmp_path / "long_cell.csv"
    long_cell.write_text("question,answer\nRetention?," + "x" * 60 + "\n")
    code, err = run(capsys, "kb", "import", "--account", account, str(long_cell))
    assert code == 1 and "uploads.max_cell_chars = 50" in err
    fits = tmp_path / "fits.csv"
    fits.write_text("question,answer\nRetention?,Thirty days.\n")
    code, out = run(capsys, "kb", "import", "--account", account, str(fits), "--json")
    assert code == 0 and out["imported"] == 1
