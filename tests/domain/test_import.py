"""Importing questionnaires (CSV, XLSX) into RFP items."""

from __future__ import annotations

import io
import time

import aiohttp
from conftest import with_config
from openpyxl import Workbook

from service.domain.questionnaires import XLSX_MEDIA_TYPE
from service.web.app import create_app


def vendor_assessment_xlsx() -> bytes:
    """An instructions sheet, then a questions sheet with a title, section rows and a section column."""
    workbook = Workbook()
    instructions = workbook.active
    instructions.title = "Instructions"
    instructions.append(["Acme Vendor Security Assessment"])
    instructions.append(["Please answer each question"])
    instructions.append([
        "Answer every question on the Questions sheet. Do not change the layout of this workbook; "
        "use the Comments column for anything that does not fit the Answer column."
    ])
    questions = workbook.create_sheet("Questions")
    questions.append(["Acme Vendor Security Assessment v2"])
    questions.append([])
    questions.append(["ID", "Category", "Question", "Answer", "Comments"])
    questions.append(["Application Security"])
    questions.append(["APP-01", None, "Do you perform code reviews?", None, None])
    questions.append(["APP-02", None, "Do you scan dependencies?\nName the tooling.", None, None])
    questions.append(["APP-03", None, None, None, "not applicable"])
    questions.append(["DATA-01", "Data Protection", "Is data encrypted at rest?", None, None])
    questions.append(["DATA-02", None, "Is data encrypted in transit?", None, None])
    workbook.create_sheet("Lists").append(["Yes", "No", "N/A"])
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


async def new_rfp(client, actor) -> str:
    response = await client.post("/api/v1/rfps", json={"rfp": {"title": "Vendor review"}},
                                 headers=actor.headers)
    assert response.status == 201
    return (await response.json())["id"]


async def items_of(client, actor, rfp_id) -> list[dict]:
    response = await client.get(f"/api/v1/rfps/{rfp_id}/rfp_items", headers=actor.headers)
    return (await response.json())["rfp_items"]


async def test_import_xlsx__finds_questions_sheet_header_and_sections(client, admin):
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=vendor_assessment_xlsx(),
        headers={**admin.headers, "Content-Type": XLSX_MEDIA_TYPE},
    )
    body = await response.json()
    assert response.status == 201, body
    report = body["import"]
    assert report["sheet"] == "Questions"
    assert report["header_row"] == 3
    assert report["question_column"] == "Question"
    assert report["section_column"] == "Category"
    assert report["imported"] == 4
    assert report["skipped"] == [
        {"row": 4, "reason": "section heading"},
        {"row": 7, "reason": "blank question"},
    ]
    items = await items_of(client, admin, rfp_id)
    assert [(i["question"], i["section"], i["position"]) for i in items] == [
        ("Do you perform code reviews?", "Application Security", 1),
        ("Do you scan dependencies?\nName the tooling.", "Application Security", 2),
        ("Is data encrypted at rest?", "Data Protection", 3),
        ("Is data encrypted in transit?", "Data Protection", 4),
    ]
    assert {i["state"] for i in items} == {"pending"}
    rfp = await (await client.get(f"/api/v1/rfps/{rfp_id}", headers=admin.headers)).json()
    assert rfp["state"] == "items_generated"
    assert rfp["stats"]["total_items"] == 4


async def test_import_xlsx__explicit_sheet_letter_and_header_row(client, admin):
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import?sheet=Questions&question_column=C"
        "&section_column=Category&header_row=3",
        data=vendor_assessment_xlsx(), headers={**admin.headers, "Content-Type": XLSX_MEDIA_TYPE},
    )
    report = (await response.json())["import"]
    assert response.status == 201
    assert (report["question_column"], report["section_column"], report["imported"]) == (
        "Question", "Category", 4,
    )



async def test_import__a_column_named_beside_a_letter_finds_the_header_row(client, admin):
    # The question column by letter and the section column by its header, in a sheet whose
    # question header ("Ask") is not one the importer recognises: the row holding "Category" is
    # the header. It was not looked for there: the section column was then 422 "columns found:
    # none (the rows are empty)", and without it the header row was imported as a question.
    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "Questions"
    sheet.append(["ID", "Category", "Ask", "Vendor response"])
    sheet.append(["A1", "Access", "Do you enforce MFA?", None])
    sheet.append(["A2", None, "Do you log admin access?", None])
    buffer = io.BytesIO()
    workbook.save(buffer)
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import?sheet=Questions&question_column=C"
        "&section_column=Category",
        data=buffer.getvalue(), headers={**admin.headers, "Content-Type": XLSX_MEDIA_TYPE},
    )
    report = (await response.json())["import"]
    assert response.status == 201
    assert (report["header_row"], report["question_column"], report["section_column"],
            report["answer_column"], report["imported"]) == (1, "Ask", "Category", "Vendor response", 2)
    assert [(item["question"], item["section"]) for item in await items_of(client, admin, rfp_id)] == [
        ("Do you enforce MFA?", "Access"), ("Do you log admin access?", "Access"),
    ]


async def test_import__a_column_named_with_no_header_row_found_says_so(client, admin):
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import?question_column=B&section_column=Domain",
        data=b"A1,Do you enforce MFA?\nA2,Do you log admin access?\n",
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    body = await response.json()
    assert response.status == 422
    assert body["error"]["details"] == [
        "section_column: no column 'Domain': no row of the first 50 holds it, so no header row was "
        "found; give the column by letter, or the header row with header_row"
    ]
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import?question_column=B&section_column=Domain&header_row=0",
        data=b"A1,Do you enforce MFA?\n", headers={**admin.headers, "Content-Type": "text/csv"},
    )
    assert (await response.json())["error"]["details"] == [
        "section_column: no column 'Domain': header_row is 0 (no header row); give the column by "
        "letter, or the header row with header_row"
    ]

async def test_import_xlsx__unknown_sheet_is_422_listing_sheets(client, admin):
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import?sheet=Nope", data=vendor_assessment_xlsx(),
        headers={**admin.headers, "Content-Type": XLSX_MEDIA_TYPE},
    )
    body = await response.json()
    assert response.status == 422
    assert "'Instructions', 'Questions', 'Lists'" in body["error"]["details"][0]


async def test_import_csv__bom_quoted_newlines_and_carried_section(client, admin):
    rfp_id = await new_rfp(client, admin)
    data = (
        "\ufeffSection,Question,Answer\r\n"
        'General,"Describe your\r\nbackup policy, briefly.",\r\n'
        ',Who is your data protection officer?,\r\n'
        ',,\r\n'
        'Access,"Do you enforce ""MFA""?",yes\r\n'
    ).encode()
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=data,
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    body = await response.json()
    assert response.status == 201, body
    assert body["import"]["question_column"] == "Question"
    assert body["import"]["section_column"] == "Section"
    assert body["import"]["skipped"] == []
    items = await items_of(client, admin, rfp_id)
    assert [(i["question"], i["section"]) for i in items] == [
        ("Describe your\nbackup policy, briefly.", "General"),
        ("Who is your data protection officer?", "General"),
        ('Do you enforce "MFA"?', "Access"),
    ]


async def test_import__every_leading_bom_is_dropped_and_a_header_cell_s_bom_ignored(client, admin):
    """A CSV opening with two BOMs kept the second in its first header ("\ufeffQuestion" named
    no question column: 422); an XLSX header cell holding one (pasted from such a file) alike."""
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import",
        data="\ufeff\ufeffQuestion;Answer\r\nIs MFA enforced?;\r\n".encode(),
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    body = await response.json()
    assert response.status == 201, body
    assert body["import"]["question_column"] == "Question"
    workbook = Workbook()
    workbook.active.append(["\ufeffQuestion"])
    workbook.active.append(["Is data encrypted at rest?"])
    buffer = io.BytesIO()
    workbook.save(buffer)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=buffer.getvalue(),
        headers={**admin.headers, "Content-Type": XLSX_MEDIA_TYPE},
    )
    assert response.status == 201, await response.json()
    assert [i["question"] for i in await items_of(client, admin, rfp_id)] == [
        "Is MFA enforced?", "Is data encrypted at rest?"]


async def test_import_csv__semicolon_separated_windows_1252(client, admin):
    rfp_id = await new_rfp(client, admin)
    data = "Nr;Frage / Question;Antwort\n1;Wo liegen die Daten? (Rechenzentrum in Köln);\n".encode("cp1252")
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=data,
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    assert response.status == 201, await response.json()
    items = await items_of(client, admin, rfp_id)
    assert items[0]["question"] == "Wo liegen die Daten? (Rechenzentrum in Köln)"


async def test_import__no_question_column_is_422_naming_columns_found(client, admin):
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=b"ID,Answer,Notes\n1,yes,none\n",
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    body = await response.json()
    assert response.status == 422
    assert body["error"]["code"] == "validation_failed"
    assert "no question column" in body["error"]["details"][0]
    assert "'ID', 'Answer', 'Notes'" in body["error"]["details"][0]
    assert await items_of(client, admin, rfp_id) == []


async def test_import__named_question_column_missing_is_422(client, admin):
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import?question_column=Prompt%20Text",
        data=b"ID,Question\n1,Why?\n", headers={**admin.headers, "Content-Type": "text/csv"},
    )
    body = await response.json()
    assert response.status == 422
    assert body["error"]["details"] == [
        "question_column: no column 'Prompt Text'; columns found: 'ID', 'Question'"
    ]


async def test_import__multipart_file_field(client, admin):
    rfp_id = await new_rfp(client, admin)
    form = aiohttp.FormData()
    form.add_field("file", vendor_assessment_xlsx(), filename="assessment.xlsx",
                   content_type="application/octet-stream")
    response = await client.post(f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=form,
                                 headers=admin.headers)
    assert response.status == 201, await response.json()
    assert (await response.json())["import"]["imported"] == 4


async def test_import__appends_after_existing_items(client, admin):
    rfp_id = await new_rfp(client, admin)
    await client.post(f"/api/v1/rfps/{rfp_id}/rfp_items", json={"rfp_item": {"question": "First?"}},
                      headers=admin.headers)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=b"Question\nSecond?\nThird?\n",
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    assert (await response.json())["import"]["first_position"] == 2
    items = await items_of(client, admin, rfp_id)
    assert [(i["question"], i["position"]) for i in items] == [
        ("First?", 1), ("Second?", 2), ("Third?", 3),
    ]


async def test_import__5000_rows_past_the_json_body_limit_in_seconds(aiohttp_client, config, admin):
    client = await aiohttp_client(create_app(with_config(config, server={"max_body_bytes": 10_000})))
    rfp_id = await new_rfp(client, admin)
    lines = ["Section,Question"] + [
        f"Section {n // 100},Question number {n}: describe control {n} in detail?" for n in range(5000)
    ]
    data = "\n".join(lines).encode()
    assert len(data) > 10_000
    started = time.monotonic()
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=data,
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    elapsed = time.monotonic() - started
    assert response.status == 201, await response.json()
    assert (await response.json())["import"]["imported"] == 5000
    assert elapsed < 10
    rfp = await (await client.get(f"/api/v1/rfps/{rfp_id}", headers=admin.headers)).json()
    assert rfp["stats"]["total_items"] == 5000


async def test_import__over_upload_limit_is_413(aiohttp_client, config, admin):
    client = await aiohttp_client(create_app(with_config(config, server={"max_upload_bytes": 1_000})))
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=b"Question\n" + b"Why?\n" * 500,
        headers={**admin.headers, "Content-Type": "text/csv"},
    )
    assert response.status == 413
    assert (await response.json())["error"]["code"] == "payload_too_large"


async def test_import__other_accounts_rfp_is_404(client, make_account):
    mine, theirs = await make_account(), await make_account()
    rfp_id = await new_rfp(client, mine)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=b"Question\nWhy?\n",
        headers={**theirs.headers, "Content-Type": "text/csv"},
    )
    assert response.status == 404


async def test_import__viewer_is_forbidden(client, admin, make_member):
    viewer = await make_member(admin.account_id, role="viewer")
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=b"Question\nWhy?\n",
        headers={**viewer.headers, "Content-Type": "text/csv"},
    )
    assert response.status == 403


async def test_import__old_xls_is_422(client, admin):
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=b"\xd0\xcf\x11\xe0" + b"\x00" * 100,
        headers={**admin.headers, "Content-Type": "application/vnd.ms-excel"},
    )
    assert response.status == 422
    assert ".xls" in (await response.json())["error"]["details"][0]


def strict_xlsx() -> bytes:
    """A workbook as Excel's "Strict Open XML Spreadsheet" writes one: its parts' elements in the
    ISO/IEC 29500 Strict namespaces (an ordinary workbook, renamed so)."""
    import zipfile

    source = io.BytesIO()
    book = Workbook()
    book.active.append(["Question", "Answer"])
    book.active.append(["Is data encrypted at rest?", ""])
    book.save(source)
    strict = {"http://schemas.openxmlformats.org/spreadsheetml/2006/main":
              "http://purl.oclc.org/ooxml/spreadsheetml/main",
              "http://schemas.openxmlformats.org/officeDocument/2006/relationships":
              "http://purl.oclc.org/ooxml/officeDocument/relationships"}
    out = io.BytesIO()
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(out, "w") as renamed:
        for name in original.namelist():
            text = original.read(name).decode()
            if name.startswith("xl/"):
                for transitional, iso in strict.items():
                    text = text.replace(transitional, iso)
            renamed.writestr(name, text)
    return out.getvalue()


async def test_import__strict_open_xml_is_422_saying_so(client, admin):
    # It was a 422 saying the workbook had no sheets.
    rfp_id = await new_rfp(client, admin)
    response = await client.post(
        f"/api/v1/rfps/{rfp_id}/rfp_items/import", data=strict_xlsx(),
        headers={**admin.headers, "Content-Type": XLSX_MEDIA_TYPE},
    )
    assert response.status == 422
    assert "Strict Open XML" in (await response.json())["error"]["details"][0]
