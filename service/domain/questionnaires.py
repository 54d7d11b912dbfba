"""Questionnaires (CSV, XLSX) → RFP items, in file order, with each row's section.

Parsing is synchronous and streaming (csv over a text stream, openpyxl in read-only mode), so the
HTTP handler runs it in a thread and the CLI calls it directly. What the file holds decides:

- the sheet: the named one, else the first (of the first 100) whose opening rows hold a
  question-like header;
- the header row: the given one (0 = none), else the first of the opening rows with a cell that
  looks like a question header ("Question", "Requirement", "Subcategory" …);
- the question column: the given header name or letter, else the best question-like header;
- the section column: the given one, else a header like "Section", "Category", "Domain";
  a blank section cell keeps the previous row's section (merged cells read that way).

A row whose only text is outside the question column, and is not an identifier like "AC-2", is a
section heading: it sets the section of the rows below it. Rows skipped are reported with their
row number and why; wholly empty rows are skipped silently.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import date, datetime, time
from itertools import chain, islice
from typing import IO, Any

import attrs

from . import uploads
from .errors import ValidationFailed
from .uploads import Limits, Tally, checked_row, column_letter, too_many_elements

HEADER_SCAN_ROWS = 50  # a header further down than this is not looked for (pass header_row)
SHEETS_SEARCHED = 100  # a question sheet further on than this is not looked for (pass sheet)
# A sheet's XML elements cost ~1 µs each to read, however small they zip: what its rows may hold
# besides their cells (rich text runs, ~10 elements each), and what it may have before them (a
# <col> per column, 16,384 at most, and its views).
ROW_ELEMENTS_PER_COLUMN = 100
MAX_ELEMENTS_BEFORE_ROWS = 100_000
MAX_HEADER_CELL = 80  # longer cells are prose (instructions), not headers
MAX_QUESTION = 100_000
MAX_SECTION = 500
MAX_SKIPPED_LISTED = 1_000

XLSX_MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"

# Question-like headers, best first. A header naming an identifier ("Question ID") is not one.
_QUESTION_HEADERS = [
    re.compile(p)
    for p in (
        r"^questions?$",
        r"\bquestions?\b",
        r"\brequirements?\b",
        r"\b(control|item) (text|description)\b",
        r"\bsubcategory\b",
        r"\b(criteria|criterion|prompt|query|request)\b",
        r"^(item|control|description)$",
    )
]
_IDENTIFIER_HEADER = re.compile(r"\b(id|ids|#|no|nr|num|number|ref|reference|key|code)$")
_SECTION_HEADERS = [
    re.compile(p)
    for p in (r"^(section|category|domain|area|topic|group|function|chapter)( name| title)?$",)
]
# Answer-like headers (write-back, issue 20): where an export writes each item's answer.
_ANSWER_HEADERS = [
    re.compile(p)
    for p in (
        r"^(answers?|responses?|replies|reply)$",
        r"^((vendor|supplier|bidder|provider|your|institution) )?(answer|response|reply)s?\b",
        r"^(yes ?/ ?no|y ?/ ?n|compliant|compliance)\b",
        r"\b(answer|response)s?$",
    )
]
# "AC-2", "GNRL-01", "1.2.3", "ID.AM-01": a row's identifier, not a section heading.
_IDENTIFIER_VALUE = re.compile(r"^(?=\S*\d)[\w.\-/#]+$")
_COLUMN_LETTERS = re.compile(r"^[A-Za-z]{1,3}$")

Progress = Callable[[int], None]
DEFAULT_LIMITS = Limits()


@attrs.frozen(kw_only=True)
class ImportOptions:
    sheet: str | None = None
    question_column: str | None = None
    section_column: str | None = None
    header_row: int | None = None  # 1-based; 0 = the file has no header row
    answer_column: str | None = None  # write-back: header name or letter; default: detected


@attrs.frozen(kw_only=True)
class ImportedRow:
    question: str
    section: str | None
    row: int


@attrs.frozen(kw_only=True)
class SkippedRow:
    row: int
    reason: str


@attrs.frozen(kw_only=True)
class Questionnaire:
    """What an import found: the items in file order and the rows it skipped."""

    sheet: str | None
    header_row: int | None
    question_column: str
    section_column: str | None
    rows: list[ImportedRow]
    skipped: list[SkippedRow]
    skipped_count: int
    # Write-back (issue 20): the answer column's name and 0-based index, when one was found.
    answer_column: str | None = None
    answer_index: int | None = None
    header_width: int = 0  # columns in the header row (a CSV export appends an answer column there)


@attrs.frozen
class _Layout:
    header_row: int | None  # 1-based row number, None without a header
    header: list[str]
    question: int  # 0-based column index
    section: int | None
    answer: int | None = None

    def column_name(self, index: int) -> str:
        name = self.header[index] if index < len(self.header) else ""
        return name or column_letter(index)


# -- cells and columns --------------------------------------------------------------------


def cell_text(value: Any) -> str:
    """A cell as text: strings stripped, whole numbers without `.0`, dates in ISO form."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.replace("\r\n", "\n").replace("\r", "\n").strip()
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return str(value).strip()


def column_index(letters: str) -> int:
    """A → 0, Z → 25, AA → 26."""
    index = 0
    for char in letters.upper():
        index = index * 26 + ord(char) - ord("A") + 1
    return index - 1


def _normal(header: str) -> str:
    return " ".join(header.lower().replace("_", " ").replace(uploads.BOM, "").split()).rstrip(":*? ").strip()


def _question_rank(header: str) -> int | None:
    """The rank (0 best) of a question-like header, or None for any other header."""
    text = _normal(header)
    if not text or len(text) > MAX_HEADER_CELL or _IDENTIFIER_HEADER.search(text):
        return None
    for rank, pattern in enumerate(_QUESTION_HEADERS):
        if pattern.search(text):
            return rank
    return None


def _is_section_header(header: str) -> bool:
    text = _normal(header)
    return any(pattern.search(text) for pattern in _SECTION_HEADERS)


def _find_named(header: list[str], name: str) -> int | None:
    wanted = _normal(name)
    for index, cell in enumerate(header):
        if cell and _normal(cell) == wanted:
            return index
    return None


def _columns_found(header: list[str]) -> str:
    names = [cell for cell in header if cell]
    return ", ".join(repr(name) for name in names[:30]) or "none (the rows are empty)"


# -- layout: header row, question and section columns ----------------------------------------


def _resolve(header: list[str], spec: str, option: str, header_row: int | None = None) -> int:
    """A column given by header name (preferred) or by letter."""
    found = _find_named(header, spec) if header else None
    if found is not None:
        return found
    if _COLUMN_LETTERS.match(spec.strip()):
        return column_index(spec.strip())
    if not header:  # no header row found (or header_row=0): there are no names to list
        problem = ("header_row is 0 (no header row)" if header_row == 0 else
                   f"no row of the first {HEADER_SCAN_ROWS} holds it, so no header row was found")
        raise ValidationFailed(
            [f"{option}: no column {spec!r}: {problem}; give the column by letter, or the header "
             f"row with header_row"],
            message=f"the {option} was not found",
        )
    raise ValidationFailed(
        [f"{option}: no column {spec!r}; columns found: {_columns_found(header)}"],
        message=f"the {option} was not found",
    )


def _detect_header(head: list[tuple[int, list[str]]], options: ImportOptions) -> tuple[int, list[str]] | None:
    # The row holding a column named in the options is the header: the question column's name
    # first, then the section's and the answer column's (not a letter: "B" is no header's name,
    # and may well be a cell's text).
    named = [options.question_column] + [
        spec for spec in (options.section_column, options.answer_column)
        if spec and not _COLUMN_LETTERS.match(spec.strip())
    ]
    for spec in filter(None, named):
        for number, cells in head:
            if _find_named(cells, spec) is not None:
                return number, cells
    for number, cells in head:
        ranks = [rank for cell in cells if (rank := _question_rank(cell)) is not None]
        # A lone short sentence ("Please answer each question") is not a header; a lone
        # "Question" cell is (a one-column questionnaire).
        if ranks and (sum(1 for cell in cells if cell) >= 2 or min(ranks) == 0):
            return number, cells
    return None


def _layout(head: list[tuple[int, list[str]]], options: ImportOptions, where: str) -> _Layout:
    """Work out the header row and columns from the opening rows; 422 naming what was found."""
    header_row: int | None = None
    header: list[str] = []
    if options.header_row:
        header = next((cells for number, cells in head if number == options.header_row), [])
        header_row = options.header_row
        if not header:
            raise ValidationFailed(
                [f"header_row: row {options.header_row} is empty or beyond the first "
                 f"{HEADER_SCAN_ROWS} rows{where}"],
                message="the header row was not found",
            )
    elif options.header_row is None:
        detected = _detect_header(head, options)
        if detected:
            header_row, header = detected

    if options.question_column:
        question = _resolve(header, options.question_column, "question_column", options.header_row)
    else:
        ranked = [(rank, i) for i, cell in enumerate(header) if (rank := _question_rank(cell)) is not None]
        if not ranked:
            first = header or next((cells for _, cells in head if any(cells)), [])
            raise ValidationFailed(
                [f"question_column: no question column found{where}; columns found: "
                 f"{_columns_found(first)}. Name it with question_column (header or letter)."],
                message="the file has no question column",
            )
        question = min(ranked)[1]

    section: int | None = None
    if options.section_column:
        section = _resolve(header, options.section_column, "section_column", options.header_row)
    else:
        section = next(
            (i for i, cell in enumerate(header) if i != question and _is_section_header(cell)), None
        )
    if options.answer_column:
        answer = _resolve(header, options.answer_column, "answer_column", options.header_row)
    else:
        answer = _answer_column(header, {question, section})
    return _Layout(header_row=header_row, header=header, question=question, section=section,
                   answer=answer)


def _answer_column(header: list[str], taken: set[int | None]) -> int | None:
    """The best answer-like header's column, if any (never the question or section column)."""
    ranked = [
        (rank, index)
        for index, cell in enumerate(header)
        if index not in taken and cell and len(cell) <= MAX_HEADER_CELL
        for rank, pattern in enumerate(_ANSWER_HEADERS)
        if pattern.search(_normal(cell))
    ]
    return min(ranked)[1] if ranked else None


# -- rows → items ---------------------------------------------------------------------------


def _items(
    rows: Iterable[tuple[int, list[str]]], layout: _Layout, progress: Progress | None, limits: Limits
) -> tuple[list[ImportedRow], list[SkippedRow], int]:
    imported: list[ImportedRow] = []
    skipped: list[SkippedRow] = []
    skipped_count = 0
    section: str | None = None
    header_key = [_normal(cell) for cell in layout.header]

    def skip(number: int, reason: str) -> None:
        nonlocal skipped_count
        skipped_count += 1
        if len(skipped) < MAX_SKIPPED_LISTED:
            skipped.append(SkippedRow(row=number, reason=reason))

    done = 0
    for number, cells in rows:
        done += 1
        if progress and done % 500 == 0:
            progress(500)
        if layout.header_row is not None and number <= layout.header_row:
            continue
        filled = [(i, cell) for i, cell in enumerate(cells) if cell]
        if not filled:
            continue
        question = cells[layout.question] if layout.question < len(cells) else ""
        section_cell = (
            cells[layout.section] if layout.section is not None and layout.section < len(cells) else ""
        )
        if section_cell:
            section = section_cell[:MAX_SECTION]
        if not question:
            if len(filled) == 1 and not _IDENTIFIER_VALUE.match(filled[0][1]):
                section = filled[0][1][:MAX_SECTION]
                skip(number, "section heading")
            else:
                skip(number, "blank question")
            continue
        if header_key and [_normal(cell) for cell in cells] == header_key:
            skip(number, "repeated header row")
            continue
        if len(question) > MAX_QUESTION:
            skip(number, f"question longer than {MAX_QUESTION} characters")
            continue
        if len(imported) == limits.max_items:
            raise limits.refuse(f"row {number}: more than {limits.max_items} questions", "max_items")
        imported.append(ImportedRow(question=question, section=section, row=number))
    if progress:
        progress(done % 500)
    return imported, skipped, skipped_count


def _parse_rows(
    rows: Iterator[tuple[int, list[str]]],
    options: ImportOptions,
    sheet: str | None,
    progress: Progress | None,
    limits: Limits,
    where: str = "",
) -> Questionnaire:
    head = list(islice(rows, HEADER_SCAN_ROWS))
    layout = _layout(head, options, where)
    return _questionnaire(chain(head, rows), layout, sheet, progress, limits)


def _questionnaire(
    rows: Iterable[tuple[int, list[str]]], layout: _Layout, sheet: str | None,
    progress: Progress | None, limits: Limits,
) -> Questionnaire:
    imported, skipped, skipped_count = _items(rows, layout, progress, limits)
    return Questionnaire(
        sheet=sheet,
        header_row=layout.header_row,
        question_column=layout.column_name(layout.question),
        section_column=None if layout.section is None else layout.column_name(layout.section),
        rows=imported,
        skipped=skipped,
        skipped_count=skipped_count,
        answer_column=None if layout.answer is None else layout.column_name(layout.answer),
        answer_index=layout.answer,
        header_width=len(layout.header),
    )


# -- CSV --------------------------------------------------------------------------------------


def parse_questionnaire_csv(binary: IO[bytes], options: ImportOptions, progress: Progress | None = None,
                            limits: Limits = DEFAULT_LIMITS) -> Questionnaire:
    """A CSV questionnaire: UTF-8 (a BOM is dropped), else Windows-1252; `,` `;` tab or `|`."""
    if options.sheet:
        raise ValidationFailed(["sheet: a CSV file has no sheets"], message="the sheet was not found")

    def questionnaire(records: Iterator[tuple[int, list[str]]]) -> Questionnaire:
        rows = ((number, [cell_text(cell) for cell in cells]) for number, cells in records)
        return _parse_rows(rows, options, None, progress, limits)

    return uploads.read_csv(binary, limits, questionnaire, encodings=("utf-8-sig", "cp1252"))


# -- XLSX -------------------------------------------------------------------------------------


@attrs.frozen
class _Workbook:
    """What parsing a workbook's sheets needs, read without openpyxl's load_workbook: that parses
    each sheet up to its `<dimension>`, and with none, the whole sheet (4 million empty rows, 37 KB
    zipped, took 3.3 s before a row was read)."""

    archive: Any  # zipfile.ZipFile
    sheets: list[tuple[str, str]]  # (name, path in the zip), in the workbook's order
    shared_strings: list[Any]
    workbook: Any  # openpyxl's Workbook: the epoch and the number formats that are dates

    def path(self, name: str) -> str | None:
        return next((path for sheet, path in self.sheets if sheet == name), None)


_SHARED_STRING = re.compile(rb"<(?:[A-Za-z_][\w.-]{0,30}:)?si[\s/>]")
_COUNT_CHUNK = 1 << 20
# XML elements a shared string may take on average: <si><t> for plain text, about ten a rich
# text run.
SHARED_STRING_ELEMENTS = 10
_COUNT_OVERLAP = 40  # longer than any match of _SHARED_STRING


def _chunks(archive: Any, path: str) -> Iterator[tuple[bytes, int]]:
    """A zip member's bytes a chunk at a time, as (data, cut): what starts before `cut` is
    counted with this chunk, the rest (the last _COUNT_OVERLAP bytes) with the next."""
    tail = b""
    with archive.open(path) as part:
        while True:
            chunk = part.read(_COUNT_CHUNK)
            data = tail + chunk
            cut = max(len(data) - _COUNT_OVERLAP, 0) if chunk else len(data)
            yield data, cut
            if not chunk:
                return
            tail = data[cut:]


def xml_elements(data: bytes, cut: int | None = None) -> int:
    """XML elements (start tags; comments and the like too) starting before `cut` (None: all)."""
    cut = len(data) if cut is None else cut
    return data.count(b"<", 0, cut) - data.count(b"</", 0, cut + 1)


# An element of a part openpyxl reads whole when it opens the workbook costs it 8-13 µs, three or
# four times one of a sheet or of the shared strings table (2-4 µs): it counts this many times
# against max_file_xml_elements.
WHOLE_PART_ELEMENT_WEIGHT = 4


def _check_elements(archive: Any, path: str, limits: Limits, tally: Tally) -> None:
    """Refuse a part openpyxl reads whole when it opens the workbook (content types, the
    workbook and its relationships, the styles) of more than max_xml_elements XML elements,
    counted in its bytes first: each costs it 10-20 µs (300,000 fonts, 17 KB zipped, 6.3 s).
    They count WHOLE_PART_ELEMENT_WEIGHT times each in the file's elements."""
    elements = 0
    for data, cut in _chunks(archive, path):
        found = xml_elements(data, cut)
        elements += found
        if elements > limits.max_xml_elements:
            raise limits.refuse(f"the part {path!r} holds more than {limits.max_xml_elements} XML "
                                "elements", "max_xml_elements")
        tally.spend(WHOLE_PART_ELEMENT_WEIGHT * found, limits,
                    f"the part {path!r} (read whole at opening: {WHOLE_PART_ELEMENT_WEIGHT} an element)")


def _check_shared_strings(archive: Any, path: str, limits: Limits, tally: Tally) -> None:
    """Refuse a shared strings table of more than max_shared_strings strings before openpyxl
    reads it whole (1.47 million strings, 75 KB zipped, took 9.8 s), or of more than
    SHARED_STRING_ELEMENTS a string allowed of XML elements (one string of 500,000 rich text
    runs took 3.3 s). Both are counted in the bytes, a chunk at a time: the table's declared
    count may lie."""
    count = elements = 0
    most_elements = SHARED_STRING_ELEMENTS * limits.max_shared_strings
    for data, cut in _chunks(archive, path):
        count += len(_SHARED_STRING.findall(data)) - len(_SHARED_STRING.findall(data, cut))
        found = xml_elements(data, cut)
        elements += found
        if count > limits.max_shared_strings:
            raise limits.refuse(f"the shared strings table holds more than "
                                f"{limits.max_shared_strings} strings", "max_shared_strings")
        if elements > most_elements:
            raise limits.refuse(f"the shared strings table holds more than {most_elements} XML "
                                f"elements ({SHARED_STRING_ELEMENTS} a string allowed)",
                                "max_shared_strings")
        tally.spend(found, limits, "the shared strings table")


# Excel's "Strict Open XML Spreadsheet" names its parts' elements in these namespaces, which
# openpyxl does not read: it found no sheets in one, and the 422 said the workbook had none.
_STRICT_NAMESPACE = b"http://purl.oclc.org/ooxml/spreadsheetml/main"


def _refuse_strict(archive: Any, workbook_path: str) -> None:
    with archive.open(workbook_path) as part:
        head = part.read(4096)  # the root element and its namespace declarations
    if _STRICT_NAMESPACE in head:
        raise ValidationFailed(
            ["file: the workbook is saved as Strict Open XML Spreadsheet, which is not read; "
             "save it as an Excel Workbook (.xlsx) and import that"],
            message="the file could not be read")


def _open_workbook(binary: IO[bytes], limits: Limits, tally: Tally) -> _Workbook:
    """The workbook's sheets, shared strings and number formats, as load_workbook(read_only=True)
    reads them but for the sheets themselves, which only `_sheet_rows` reads. The elements of the
    parts it reads are counted in `tally` before they are read."""
    from openpyxl.packaging.relationship import get_rels_path
    from openpyxl.reader.excel import ExcelReader, _find_workbook_part
    from openpyxl.styles.stylesheet import apply_stylesheet
    from openpyxl.xml.constants import ARC_CONTENT_TYPES, ARC_STYLE, SHARED_STRINGS

    # keep_links=False: external links (cached copies of other workbooks) are not read.
    reader = ExcelReader(binary, read_only=True, data_only=True, keep_links=False)
    try:
        _check_elements(reader.archive, ARC_CONTENT_TYPES, limits, tally)
        reader.read_manifest()
        strings = reader.package.find(SHARED_STRINGS)
        if strings is not None:
            _check_shared_strings(reader.archive, strings.PartName[1:], limits, tally)
        reader.read_strings()
        workbook_path = _find_workbook_part(reader.package).PartName[1:]
        for path in (workbook_path, get_rels_path(workbook_path)):
            _check_elements(reader.archive, path, limits, tally)
        _refuse_strict(reader.archive, workbook_path)
        reader.read_workbook()
        if ARC_STYLE in reader.valid_files:
            _check_elements(reader.archive, ARC_STYLE, limits, tally)
        apply_stylesheet(reader.archive, reader.wb)
        sheets = [(sheet.name, rel.target) for sheet, rel in reader.parser.find_sheets()
                  if rel.target in reader.valid_files and "chartsheet" not in rel.Type]
    except BaseException:
        reader.archive.close()
        raise
    return _Workbook(archive=reader.archive, sheets=sheets, shared_strings=reader.shared_strings,
                     workbook=reader.wb)


def _sheet_rows(book: _Workbook, path: str, limits: Limits, tally: Tally) -> Iterator[tuple[int, list[str]]]:
    """A sheet's rows as (row number, cells), rows that are not in the file left out, read with
    openpyxl's row parser from our own pass over the XML, which checks the limits as it goes:
    the rows and a row's cells are counted as they start (a row of 543,000 cells, 75 KB
    zipped, was built whole before its width was checked: 7.6 s), and the pass stops at the
    end of `<sheetData>` (nothing after it is read). openpyxl's own iter_rows() makes up
    every missing row before a `<row r="20000000">`; row numbers are checked here first. Each
    element is counted in `tally`, the file's, as it starts."""
    from openpyxl.worksheet._reader import CELL_TAG, DATA_TAG, ROW_TAG, WorkSheetParser
    from openpyxl.xml.functions import iterparse

    workbook = book.workbook
    parser = WorkSheetParser(
        None, book.shared_strings, data_only=True, epoch=workbook.epoch,
        date_formats=workbook._date_formats, timedelta_formats=workbook._timedelta_formats,
    )
    row_elements = ROW_ELEMENTS_PER_COLUMN * limits.max_columns
    with book.archive.open(path) as source:
        count = 0
        number = 0  # the row being read: its r attribute, else the one after the last
        cells = elements = outside = 0
        in_row = False
        for event, element in iterparse(source, events=("start", "end")):
            tag = element.tag
            if event == "start":
                tally.elements += 1
                if tally.elements > limits.max_file_xml_elements:
                    raise too_many_elements(limits, f"row {number} of the sheet {path!r}" if number
                                             else f"the sheet {path!r}")
                if in_row:
                    elements += 1
                    if tag == CELL_TAG:
                        cells += 1
                        if cells > limits.max_columns:
                            raise limits.refuse(f"row {number} has more than {limits.max_columns} cells",
                                                "max_columns")
                    if elements > row_elements:
                        raise limits.refuse(
                            f"row {number} holds more than {row_elements} XML elements (rich text of "
                            f"many runs; {ROW_ELEMENTS_PER_COLUMN} a column)", "max_columns")
                elif tag == ROW_TAG:
                    count += 1
                    if count > limits.max_rows:
                        raise limits.refuse(f"more than {limits.max_rows} rows", "max_rows")
                    given = element.get("r")
                    number = int(given) if given is not None and given.isdigit() else number + 1
                    if number > limits.max_row_index:
                        raise limits.refuse(f"the sheet names row {number}", "max_row_index")
                    cells = elements = 0
                    in_row = True
                else:
                    outside += 1
                    if outside > MAX_ELEMENTS_BEFORE_ROWS:
                        raise ValidationFailed(
                            [f"file: the sheet {path!r} has more than {MAX_ELEMENTS_BEFORE_ROWS} XML "
                             "elements outside its rows; a worksheet has a few thousand at most there "
                             "(its columns and views)"],
                            message="the file could not be read")
                continue
            if tag == ROW_TAG:
                in_row = False
                number, row = parser.parse_row(element)
                element.clear()
                if number > limits.max_row_index:  # an r the start did not read ("2e7")
                    raise limits.refuse(f"the sheet names row {number}", "max_row_index")
                width = max((cell["column"] for cell in row), default=0)
                if width > limits.max_columns:
                    raise limits.refuse(f"row {number} reaches column {width}", "max_columns")
                values = [""] * width
                for cell in row:
                    values[cell["column"] - 1] = cell_text(cell["value"])
                yield number, checked_row(number, values, limits, tally)
            elif tag == DATA_TAG:
                return


def _check_zip(binary: IO[bytes], limits: Limits) -> None:
    """Refuse an XLSX whose parts would unpack past max_zip_member_bytes (a zip bomb), or whose
    XML declares a DTD (entities: an XLSX never has one), before openpyxl reads any of it.
    zipfile stops at the declared size, so checking the declared sizes is enough."""
    import zipfile

    try:
        with zipfile.ZipFile(binary) as archive:
            for member in archive.infolist():
                if member.file_size > limits.max_zip_member_bytes:
                    raise limits.refuse(
                        f"the part {member.filename!r} unpacks to {member.file_size} bytes",
                        "max_zip_member_bytes",
                    )
                if member.filename.endswith((".xml", ".rels")):
                    with archive.open(member) as part:
                        if b"<!DOCTYPE" in part.read(64 * 1024):
                            raise ValidationFailed(
                                [f"file: the part {member.filename!r} declares a DTD; XLSX files "
                                 "never do (an entity expansion bomb does)"],
                                message="the file could not be read",
                            )
    except zipfile.BadZipFile:
        raise ValidationFailed([DAMAGED_ZIP], message="the file could not be read") from None
    except (zipfile.LargeZipFile, NotImplementedError, EOFError, ValueError, OSError) as exc:
        raise ValidationFailed([f"file: not a readable XLSX workbook ({exc})"],
                               message="the file could not be read") from None
    finally:
        binary.seek(0)


# An XLSX workbook is a ZIP archive. zipfile's own words ("File is not a zip file") tell a
# proposal team nothing: a file named or sent as XLSX that is no archive was most often saved in
# another format, and one that starts as an archive and breaks off was cut short.
NOT_A_ZIP = ("file: not an XLSX workbook (its content is not the ZIP archive every .xlsx file is; "
             "was it renamed from another format? Save it from the spreadsheet as .xlsx or CSV)")
DAMAGED_ZIP = ("file: not a readable XLSX workbook (the ZIP archive every .xlsx file is, is damaged "
               "or cut short: download or save it again)")


def parse_xlsx(binary: IO[bytes], options: ImportOptions, progress: Progress | None = None,
               limits: Limits = DEFAULT_LIMITS) -> Questionnaire:
    """An XLSX questionnaire: the named sheet, else the first with a question-like header."""
    import zipfile
    from xml.etree.ElementTree import ParseError

    _check_zip(binary, limits)
    # The cells' characters and the XML elements walked are counted across every part and sheet
    # read: a shared string counts each time a cell names it.
    tally = Tally()
    try:
        book = _open_workbook(binary, limits, tally)
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, ParseError, TypeError) as exc:
        raise ValidationFailed([f"file: not a readable XLSX workbook ({exc})"],
                               message="the file could not be read") from None
    try:
        if options.sheet is not None:
            path = book.path(options.sheet)
            if path is None:
                names = [name for name, _ in book.sheets]
                listed = ", ".join(map(repr, names[:30]))
                if len(names) > 30:
                    listed += f" and {len(names) - 30} more"
                raise ValidationFailed([f"sheet: no sheet {options.sheet!r}; sheets: {listed}"],
                                       message="the sheet was not found")
            return _parse_rows(_sheet_rows(book, path, limits, tally), options, options.sheet,
                               progress, limits, where=f" in sheet {options.sheet!r}")
        problems: list[str] = []
        # Each sheet looked at costs its opening rows: a workbook naming its one sheet 20,000
        # times (107 KB) took 6.6 s, and its 422 listed 20,000 problems.
        for name, path in book.sheets[:SHEETS_SEARCHED]:
            rows = _sheet_rows(book, path, limits, tally)
            head = list(islice(rows, HEADER_SCAN_ROWS))
            try:
                layout = _layout(head, options, f" in sheet {name!r}")
            except ValidationFailed as exc:
                problems.extend(exc.details or [])
                continue
            return _questionnaire(chain(head, rows), layout, name, progress, limits)
        if len(book.sheets) > SHEETS_SEARCHED:
            problems.append(f"sheet: the workbook has {len(book.sheets)} sheets; only the first "
                            f"{SHEETS_SEARCHED} were looked at for a question column: name the sheet")
        raise ValidationFailed(problems or ["file: the workbook has no sheets"],
                               message="the file has no question column")
    except ParseError as exc:  # malformed XML inside the workbook (or an expat limit reached)
        raise ValidationFailed([f"file: the workbook's XML is not readable ({exc})"],
                               message="the file could not be read") from None
    finally:
        book.archive.close()


# -- either -----------------------------------------------------------------------------------


def detect_format(head: bytes, media_type: str | None, filename: str | None) -> str:
    """"xlsx" or "csv" from the first bytes, the declared media type and the file name."""
    name = (filename or "").lower()
    if head.startswith(b"PK\x03\x04"):
        return "xlsx"
    if head.startswith(b"\xd0\xcf\x11\xe0") or name.endswith(".xls"):
        raise ValidationFailed(["file: old Excel (.xls) files are not supported; save it as .xlsx"],
                               message="the file format is not supported")
    if media_type == XLSX_MEDIA_TYPE or name.endswith(".xlsx"):
        raise ValidationFailed([NOT_A_ZIP], message="the file could not be read")
    return "csv"


def parse(binary: IO[bytes], options: ImportOptions, media_type: str | None = None,
          filename: str | None = None, progress: Progress | None = None,
          limits: Limits = DEFAULT_LIMITS) -> Questionnaire:
    """A questionnaire from a seekable binary file of either format, within `limits`."""
    binary.seek(0)
    head = binary.read(8)
    binary.seek(0)
    if not head:
        raise ValidationFailed(["file: the file is empty"], message="the file is empty")
    if detect_format(head, media_type, filename) == "xlsx":
        with uploads.unforeseen("file: not a readable XLSX workbook: its XML is malformed or "
                                "its parts do not agree"):
            return parse_xlsx(binary, options, progress, limits)
    with uploads.unforeseen("file: not a readable CSV questionnaire: its CSV structure is malformed"):
        return parse_questionnaire_csv(binary, options, progress, limits)


def parse_upload(data: bytes, options: ImportOptions, media_type: str | None, filename: str | None,
                 limits: Limits) -> Questionnaire:
    """`parse` of an uploaded file's bytes: what a parse worker process runs (service/domain/
    isolation.py), so its arguments and result cross a pipe."""
    return parse(io.BytesIO(data), options, media_type, filename, limits=limits)

