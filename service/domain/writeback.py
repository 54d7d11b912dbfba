"""Write-back: the customer's own questionnaire returned with the answers in their cells.

An import keeps the file (PostgreSQL bytea, per RFP, up to `library.max_kept_file_bytes`) and each
item's sheet, row and answer column. `export?format=original` writes the approved answers (or
every drafted one) into those cells and changes nothing else:

- XLSX: the answer cells are written straight into the sheet XML of the original zip; every other
  zip member is copied byte for byte, and inside a changed sheet only the answer cells' elements
  (plus the row's `spans` and the sheet's `dimension` when a cell is added past them) differ. A
  round trip through openpyxl would drop images, comments' shapes and extensions it does not know.
  An answer cell with a Yes/No (list) data validation gets the option matching the answer's Yes/No
  lead, or stays empty when the answer has none. A cell holding a formula is left alone.
- CSV: the original columns and order, the answer column filled (appended when the file had
  none), in the file's own encoding and delimiter; an answer starting like a formula (`=`, `+`,
  `-`, `@`) gets a leading `'`, as in every CSV export (SECURITY.md). XLSX answers are inline
  strings, never formulas.
"""

from __future__ import annotations

import bisect
import csv
import functools
import hashlib
import io
import itertools
import posixpath
import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

import asyncpg
import attrs

from .. import db
from .errors import ParameterInvalid, ValidationFailed
from .ids import new_id
from .library import yes_no_lead
from .questionnaires import (
    XLSX_MEDIA_TYPE,
    Questionnaire,
    column_index,
    column_letter,
    detect_format,
    xml_elements,
)
from .uploads import Limits, Tally, unforeseen

MAX_MARK = 200  # the `unanswered` marker's length
MAX_COLUMN = 16383  # XFD, a spreadsheet's last column (0-based)


# -- keeping the file at import ------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class KeptFile:
    format: str  # xlsx | csv
    filename: str | None
    content: bytes


def kept_file(content: bytes, media_type: str | None, filename: str | None, limit: int) -> KeptFile | None:
    """The uploaded questionnaire, kept for write-back when within `limit` bytes."""
    if len(content) > limit:
        return None
    fmt = detect_format(content[:8], media_type, filename)
    return KeptFile(format=fmt, filename=filename, content=content)


async def keep(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, first_position: int,
    found: Questionnaire, kept: KeptFile,
) -> str:
    """Store the file and each imported item's cell (call in the import's transaction)."""
    file_id = await conn.fetchval(
        db.query("keep_questionnaire_file"), new_id("qf"), account_id, rfp_id, kept.format,
        kept.filename, hashlib.sha256(kept.content).digest(), kept.content,
    )
    answer = found.answer_index
    if answer is None and kept.format == "csv" and found.header_row is not None:
        answer = found.header_width  # a CSV without one gets an answer column appended
    await conn.execute(
        db.query("set_item_sources"), rfp_id, file_id, found.sheet, answer,
        list(range(first_position, first_position + len(found.rows))), [r.row for r in found.rows],
    )
    return file_id


# -- the export's options ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class WriteOptions:
    drafted: bool = False  # also write answers not yet approved
    unanswered: str | None = None  # written into cells left without an answer; None: left as is
    answer_column: int | None = None  # overrides the stored/detected column (0-based)


def write_options(query: Mapping[str, str]) -> WriteOptions:
    answers = query.get("answers") or "approved"
    if answers not in ("approved", "drafted"):
        raise ParameterInvalid(f"answers must be approved or drafted; got {answers!r}")
    mark = query.get("unanswered")
    if mark is not None and len(mark) > MAX_MARK:
        raise ParameterInvalid(f"unanswered must be at most {MAX_MARK} characters")
    column = query.get("answer_column")
    index = None
    if column:
        if not re.fullmatch(r"[A-Za-z]{1,3}", column):
            raise ParameterInvalid(f"answer_column must be a column letter (A, B, … XFD); got {column!r}")
        index = column_index(column)
        if index > MAX_COLUMN:
            raise ParameterInvalid(f"answer_column must be at most XFD (the last column); got {column!r}")
    return WriteOptions(drafted=answers == "drafted", unanswered=mark or None, answer_column=index)


@attrs.frozen(kw_only=True)
class Cell:
    sheet: str | None
    row: int  # 1-based
    column: int  # 0-based
    text: str | None  # None: unanswered
    answered: bool = True  # False: `text` is the unanswered= mark, or None


async def has_original(conn: asyncpg.Connection, account_id: str, rfp_id: str) -> bool:
    """Whether the RFP has a kept questionnaire to write its answers into (`load` finds one)."""
    return await conn.fetchval(db.query("has_questionnaire_file"), rfp_id, account_id)


async def load(
    conn: asyncpg.Connection, account_id: str, rfp_id: str, options: WriteOptions,
    max_chars: int | None = None,
) -> tuple[asyncpg.Record, list[Cell]]:
    """The kept questionnaire of an RFP and the cells to write; 422 when there is none, or when
    the answers to write hold more than `max_chars` characters (uploads.max_text_chars: an
    answer holds up to 100,000 and a kept file's items up to 20,000, and the answers, the
    file written and its copy between processes are all held in memory)."""
    file = await conn.fetchrow(db.query("latest_questionnaire_file"), rfp_id, account_id)
    if file is None:
        raise ValidationFailed(
            ["format: original needs the questionnaire imported into this RFP (CSV or XLSX) and kept; "
             "items added by hand, or files over library.max_kept_file_bytes, have none"],
            message="the RFP has no original questionnaire",
        )
    if max_chars is not None:
        chars = await conn.fetchval(db.query("questionnaire_file_answer_chars"), file["id"],
                                    options.drafted)
        if chars > max_chars:
            raise ValidationFailed(
                [f"file: the answers to write back hold {chars:,} characters, more than "
                 f"uploads.max_text_chars = {max_chars:,}"],
                "the questionnaire could not be written back; export it as CSV instead",
            )
    items = await conn.fetch(db.query("questionnaire_file_items"), file["id"])
    cells = []
    for item in items:
        column = options.answer_column if options.answer_column is not None else item["answer_column"]
        if column is None:
            raise ValidationFailed(
                ["answer_column: the questionnaire's answer column was not detected; name it with "
                 "answer_column (a column letter) or import again with answer_column"],
                message="no answer column",
            )
        written = item["state"] == "approved" or options.drafted  # drafted: any answer it has
        text = item["answer"] if written and item["answer"] and item["answer"].strip() else None
        if item["state"] == "discarded":
            continue
        cells.append(Cell(sheet=item["source_sheet"], row=item["source_row"], column=column,
                          text=text if text is not None else options.unanswered,
                          answered=text is not None))
    return file, cells


# -- CSV -----------------------------------------------------------------------------------------


def write_csv(original: bytes, cells: Sequence[Cell]) -> bytes:
    """The CSV with the answer cells filled; every other field, column and row as it was."""
    for encoding in ("utf-8-sig", "cp1252"):
        try:
            text = original.decode(encoding)
            break
        except UnicodeDecodeError:
            continue
    else:  # the import read it, so this does not happen
        raise ValidationFailed(["file: the kept CSV is neither UTF-8 nor Windows-1252"])
    bom = original.startswith(b"\xef\xbb\xbf")
    try:
        dialect: Any = csv.Sniffer().sniff(text[: 64 * 1024], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows = list(csv.reader(io.StringIO(text, newline=""), dialect))
    newline = "\r\n" if "\r\n" in text else "\n"
    to_write = [c for c in cells if c.text is not None]
    widest = max((c.column for c in to_write), default=-1)
    width = max((len(row) for row in rows), default=0)
    # Checked for every item's cell, written or not: with nothing to write yet, a column outside
    # the file came back 200 with the file unchanged, and 422 only once an answer was approved.
    if max((c.column for c in cells), default=-1) > width:
        # Every answered row would be padded out to it: answers go into one of the file's
        # columns or the one after its last.
        raise ValidationFailed(
            [f"answer_column: the file has {width} columns; name one of them or the next "
             f"({column_letter(width)})"],
            message="the answer column is outside the file",
        )
    if rows and widest >= len(rows[0]):
        rows[0] = rows[0] + [""] * (widest - len(rows[0])) + ["Answer"]  # the appended column
    from .rfp_items import csv_cell  # here: rfp_items imports this module

    for cell in to_write:
        values = rows[cell.row - 1]
        if cell.column >= len(values):
            values.extend([""] * (cell.column + 1 - len(values)))
        values[cell.column] = csv_cell(cell.text)  # an answer never becomes a formula
    out = io.StringIO(newline="")
    writer = csv.writer(out, delimiter=dialect.delimiter, quotechar=dialect.quotechar or '"',
                        lineterminator=newline, quoting=csv.QUOTE_MINIMAL)
    writer.writerows(rows)
    if not text.endswith(("\n", "\r")):
        return _encode(out.getvalue().removesuffix(newline), encoding, bom)
    return _encode(out.getvalue(), encoding, bom)


def _encode(text: str, encoding: str, bom: bool) -> bytes:
    if encoding == "utf-8-sig":
        return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")
    return text.encode(encoding, errors="replace")


# -- XLSX ----------------------------------------------------------------------------------------

_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
# Excel holds at most 32,767 characters in a cell and "repairs" a file with a longer one (it
# drops the cell's text); items hold up to 200,000. A longer text is cut, saying so, in every XLSX
# we write; the CSV export has it whole. Excel counts UTF-16 units, so the cut does too.
EXCEL_CELL_CHARS = 32_767
EXCEL_CUT_NOTE = " … [cut at Excel's limit of 32,767 characters; the CSV export has it all]"


def excel_text(text: str) -> str:
    """Text as an XLSX cell can hold it: without the characters XML 1.0 cannot, and cut (saying
    so) to Excel's limit."""
    clean = _ILLEGAL_XML.sub("", text)
    if len(clean) <= EXCEL_CELL_CHARS // 2:
        return clean
    units = clean.encode("utf-16-le")
    if len(units) <= 2 * EXCEL_CELL_CHARS:
        return clean
    room = EXCEL_CELL_CHARS - len(EXCEL_CUT_NOTE)
    # "ignore" drops a pair of surrogates the cut splits.
    return units[:2 * room].decode("utf-16-le", errors="ignore") + EXCEL_CUT_NOTE


_CELL_REF = re.compile(r"^([A-Z]+)(\d+)$")


def _attr(tag: str, name: str) -> str | None:
    found = re.search(rf'\b{name}="([^"]*)"', tag)
    return None if found is None else found.group(1)


def _sheet_paths(archive: zipfile.ZipFile) -> dict[str, str]:
    """{sheet name: path of its XML in the zip}, from workbook.xml and its relationships."""
    workbook_path = "xl/workbook.xml"
    for name in archive.namelist():  # the main part is named in _rels/.rels; xl/workbook.xml by convention
        if name.endswith("workbook.xml") and name.startswith("xl/"):
            workbook_path = name
            break
    workbook = archive.read(workbook_path).decode("utf-8")
    rels_path = posixpath.join(posixpath.dirname(workbook_path), "_rels",
                               posixpath.basename(workbook_path) + ".rels")
    rels = archive.read(rels_path).decode("utf-8")
    targets = {}
    for tag in re.findall(r"<Relationship\b[^>]*>", rels):
        rel_id, target = _attr(tag, "Id"), _attr(tag, "Target")
        if rel_id and target:
            targets[rel_id] = (target.lstrip("/") if target.startswith("/")
                               else posixpath.normpath(posixpath.join(posixpath.dirname(workbook_path),
                                                                      target)))
    paths = {}
    for tag in re.findall(r"<(?:\w+:)?sheet\b[^>]*>", workbook):
        name = _attr(tag, "name")
        rel = re.search(r'\br:id="([^"]*)"|\b\w+:id="([^"]*)"', tag)
        rel_id = rel and (rel.group(1) or rel.group(2))
        if name is not None and rel_id in targets:
            paths[_unescape(name)] = targets[rel_id]
    return paths


def _unescape(text: str) -> str:
    return (text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
            .replace("&apos;", "'").replace("&amp;", "&"))


def _ranges(sqref: str) -> list[tuple[int, int, int, int]]:
    """"A1:B3 C5" → [(min_col, min_row, max_col, max_row)] with 0-based columns."""
    found = []
    for part in sqref.split():
        first, _, last = part.replace("$", "").partition(":")
        last = last or first
        a, b = _CELL_REF.match(first), _CELL_REF.match(last)
        if a and b:
            found.append((column_index(a.group(1)), int(a.group(2)),
                          column_index(b.group(1)), int(b.group(2))))
    return found


@attrs.frozen
class _ListValidation:
    ranges: list[tuple[int, int, int, int]]
    options: list[str] | None  # None: the list is a range reference (resolved with openpyxl)
    formula: str

    def covers(self, column: int, row: int) -> bool:
        return any(c1 <= column <= c2 and r1 <= row <= r2 for c1, r1, c2, r2 in self.ranges)


def _elements(xml: str, name: str) -> Iterator[tuple[_Tag, str, int]]:
    """Each element `name` (any prefix): its start tag, the text up to its first end tag, and
    where that end tag ends."""
    opened: _Tag | None = None
    for tag in _tags(xml, name):
        if tag.closing:
            if opened is not None:
                yield opened, xml[opened.end:tag.start], tag.end
                opened = None
        elif opened is None:
            if tag.self_closing:
                yield tag, "", tag.end
            else:
                opened = tag


def _between(text: str, opens: str, closes: str) -> str | None:
    """The text between the first match of the pattern `opens` and the next of `closes` after
    it: one search each (a lazy `opens(.*?)closes` reads to the end once per unclosed `opens`)."""
    start = re.search(opens, text)
    if start is None:
        return None
    end = re.compile(closes).search(text, start.end())
    return None if end is None else text[start.end():end.start()]


def _list_validations(sheet_xml: str) -> list[_ListValidation]:
    found = []
    extended = []  # x14 extension validations (lists on other sheets in older Excel files) use <xm:sqref>
    for tag, inner, _ in _elements(sheet_xml, "dataValidation"):
        if _attr(tag.attributes, "type") != "list":
            continue
        formula = _between(inner, r"<(?:\w+:)?formula1>", r"</(?:\w+:)?formula1>")
        sqref = _attr(tag.attributes, "sqref") or ""
        text = _unescape(formula) if formula is not None else ""
        options = ([o.strip() for o in text[1:-1].split(",")]
                   if text.startswith('"') and text.endswith('"') else None)
        found.append(_ListValidation(ranges=_ranges(sqref), options=options, formula=text))
        if tag.prefix != "x14:":
            continue
        formula = _between(inner, r"<xm:f>", r"</xm:f>")
        cells = _between(inner, r"<xm:sqref>", r"</xm:sqref>")
        if formula is not None and cells is not None:
            text = _unescape(formula)
            options = ([o.strip() for o in text[1:-1].split(",")]
                       if text.startswith('"') and text.endswith('"') else None)
            extended.append(_ListValidation(ranges=_ranges(cells), options=options, formula=text))
    return found + extended


def _resolve_list(original: bytes, formula: str) -> list[str]:
    """The options of a list validation that refers to cells (`Lists!$A$1:$A$3` or a name)."""
    from openpyxl import load_workbook

    workbook = load_workbook(io.BytesIO(original), data_only=True)
    try:
        reference = formula.lstrip("=")
        if "!" not in reference and reference in workbook.defined_names:
            reference = workbook.defined_names[reference].attr_text
        sheet_name, _, cells = reference.rpartition("!")
        sheet = workbook[sheet_name.strip("'").replace("''", "'")] if sheet_name else workbook.active
        values = sheet[cells.replace("$", "")]
        if not isinstance(values, tuple):
            values = ((values,),)
        elif values and not isinstance(values[0], tuple):
            values = (values,)
        return [str(cell.value).strip() for row in values for cell in row if cell.value is not None]
    except (KeyError, ValueError, IndexError, TypeError):
        return []
    finally:
        workbook.close()


def _dropdown_value(answer: str, options: Sequence[str]) -> str | None:
    """The option a Yes/No dropdown gets for an answer: its Yes/No lead's option, else an option
    the whole answer equals, else none."""
    for option in options:
        if answer.strip().lower() == option.lower():
            return option
    lead = yes_no_lead(answer)
    if lead is None:
        return None
    wanted = ("yes", "y", "true") if lead else ("no", "n", "false")
    for option in options:
        words = option.lower().replace(",", " ").replace("-", " ").split()
        if words and words[0] in wanted:  # "Yes", "Y", "Yes - fully", "No, not yet"
            return option
    return None


def _cell_xml(ref: str, attributes: str, text: str, p: str = "") -> str:
    """An inline-string cell keeping the original cell's other attributes (its style above all);
    `p` is the sheet's namespace prefix ("x:" in some generators' files, usually none)."""
    kept = re.sub(r'\s+(?:t|r)="[^"]*"', "", attributes)
    clean = excel_text(text)
    return (f'<{p}c r="{ref}"{kept} t="inlineStr"><{p}is><{p}t xml:space="preserve">'
            f"{escape(clean)}</{p}t></{p}is></{p}c>")


@attrs.frozen
class _SheetData:
    """Where a sheet's rows are, found in one pass (`_sheet_data`)."""

    rows: dict[str, tuple[int, int]]  # the r attribute → (start, end) of its row element
    numbered: list[tuple[int, int]]  # (row number, start) of each row numbered, in order
    end: int | None  # where `</sheetData>` starts (None: no such tag)
    empty: tuple[int, int] | None  # the span of a `<sheetData/>`


# Comments, CDATA sections and processing instructions, then the tags named. Each alternative
# either ends where it should or takes the rest of the text, so no match is tried again further
# on: an unclosed comment or quote costs one pass, not one per tag after it.
_MARKUP = r"<!--(?:.*?-->|.*)|<!\[CDATA\[(?:.*?\]\]>|.*)|<\?(?:.*?\?>|.*)"
_TAG_REST = r"""((?:[^>"']+|"[^"]*"|'[^']*')*+)(>|.*)"""  # possessive: no state kept per run
_MARKUP_ENDS = {"<!--": "-->", "<![CDATA[": "]]>", "<?": "?>"}


@functools.cache
def _tag_pattern(names: str) -> re.Pattern[str]:
    return re.compile(rf"{_MARKUP}|<(/?)((?:[\w.-]+:)?)({names})\b{_TAG_REST}", re.DOTALL)


@attrs.frozen
class _Tag:
    closing: bool
    prefix: str  # "x:" in <x:row>, else ""
    name: str
    attributes: str  # as written, a self-closing tag's "/" left out
    self_closing: bool
    start: int
    end: int
    attributes_at: int  # where `attributes` starts in the text


def _closed(markup: str) -> bool:
    """Whether a comment, CDATA section or processing instruction ends ("<!-->" does not)."""
    return any(markup.startswith(opens) and markup.endswith(closes)
               and len(markup) >= len(opens) + len(closes) for opens, closes in _MARKUP_ENDS.items())


def _tags(xml: str, names: str) -> Iterator[_Tag]:
    """The start and end tags of the elements `names` (a regex alternation of local names) in
    document order, in one pass that skips comments, CDATA sections and processing instructions.
    It stops at one left unclosed (nothing after it is markup)."""
    for match in _tag_pattern(names).finditer(xml):
        name = match.group(3)
        if name is None:
            if not _closed(match.group(0)):
                return
            continue
        if match.group(5) != ">":
            return  # an unclosed tag
        attributes = match.group(4)
        self_closing = attributes.endswith("/")
        yield _Tag(closing=match.group(1) == "/", prefix=match.group(2), name=name,
                   attributes=attributes[:-1] if self_closing else attributes,
                   self_closing=self_closing, start=match.start(), end=match.end(),
                   attributes_at=match.start(4))


def _sheet_data(xml: str, p: str) -> _SheetData:
    """Each row element of `<sheetData>` by its r attribute (or, without one, the number after the
    row before's), in one pass over the sheet that skips
    comments, CDATA and processing instructions (a regex searching for each answer's row was
    quadratic: a comment full of '<row ' made 1.6 KB take ~14 s). A row ends at its first
    `</row>`, as before; of rows of the same number the first is written."""
    rows: dict[str, tuple[int, int]] = {}
    numbered: list[tuple[int, int]] = []
    inside = False
    open_row: tuple[str | None, int] | None = None
    last = 0  # the number of the row before: a row without r is the one after it
    for tag in _tags(xml, "row|sheetData"):
        if tag.prefix != p:
            continue
        if tag.name == "sheetData":
            if tag.closing:
                return _SheetData(rows=rows, numbered=numbered, end=tag.start, empty=None)
            if tag.self_closing:
                return _SheetData(rows=rows, numbered=numbered, end=None, empty=(tag.start, tag.end))
            inside = True
        elif not inside:
            continue
        elif tag.closing:
            if open_row is not None:
                number, start = open_row
                if number is not None:
                    rows.setdefault(number, (start, tag.end))
                open_row = None
        elif open_row is None:
            number = _attr(tag.attributes, "r")
            if number is None:
                # As the import numbers it (and Excel): written into in place, not given a second
                # row of the same number after the others (a review: Excel then repairs the file).
                number = str(last + 1)
            if number.isdigit():
                last = int(number)
                numbered.append((last, tag.start))
            if not tag.self_closing:
                open_row = (number, tag.start)
            elif number is not None:
                rows.setdefault(number, (tag.start, tag.end))
    return _SheetData(rows=rows, numbered=numbered, end=None, empty=None)


def _write_row(row_xml: str, number: int, writes: dict[int, str], dropdowns: Any, p: str = "") -> str:
    close = f"</{p}row>"
    if row_xml.endswith("/>"):
        row_xml = row_xml[:-2].rstrip() + ">" + close
    open_end = row_xml.index(">") + 1
    head, body, tail = row_xml[:open_end], row_xml[open_end:-len(close)], close
    cells = []  # (column, xml, attributes, has formula)
    for tag, inner, end in _elements(body, "c"):
        if tag.prefix != p:
            continue
        ref = _attr(tag.attributes, "r") or ""
        parsed = _CELL_REF.match(ref)
        column = column_index(parsed.group(1)) if parsed else -1
        cells.append([column, body[tag.start:end], tag.attributes, f"<{p}f" in inner])
    if any(column < 0 for column, *_ in cells):
        return row_xml  # cells without references: positions implied; not written into
    by_column = {c[0]: c for c in cells}
    for column, text in sorted(writes.items()):
        ref = f"{column_letter(column)}{number}"
        value = dropdowns(column, number, text)
        if value is None:
            continue
        if column in by_column:
            if by_column[column][3]:
                continue  # a formula cell keeps its formula
            by_column[column][1] = _cell_xml(ref, by_column[column][2], value, p)
        else:
            style = _attr(head, "s") if _attr(head, "customFormat") == "1" else None
            attributes = f' s="{style}"' if style else ""
            by_column[column] = [column, _cell_xml(ref, attributes, value, p), attributes, False]
    new_body = "".join(by_column[c][1] for c in sorted(by_column))
    spans = _attr(head, "spans")
    if spans and writes:
        low, _, high = spans.partition(":")
        if low.isdigit() and high.isdigit():
            wanted = max(int(high), max(writes) + 1)
            head = head.replace(f'spans="{spans}"', f'spans="{low}:{wanted}"', 1)
    # Whitespace between cells (rare) is dropped only in rows written into.
    return head + new_body + tail


def _grow_dimension(sheet_xml: str, cells: Iterable[tuple[int, int]]) -> str:
    tag = next((tag for tag in _tags(sheet_xml, "dimension")
                if not tag.closing and _attr(tag.attributes, "ref") is not None), None)
    if tag is None or not cells:
        return sheet_xml
    match = [*re.finditer(r'\bref="([^"]*)"', tag.attributes)][-1]
    ranges = _ranges(match.group(1))
    if not ranges:
        return sheet_xml
    c1, r1, c2, r2 = ranges[0]
    cols = [c for c, _ in cells]
    rows = [r for _, r in cells]
    n1, m1, n2, m2 = min(c1, *cols), min(r1, *rows), max(c2, *cols), max(r2, *rows)
    if (n1, m1, n2, m2) == (c1, r1, c2, r2):
        return sheet_xml
    ref = f"{column_letter(n1)}{m1}:{column_letter(n2)}{m2}"
    at = tag.attributes_at
    return sheet_xml[:at + match.start(1)] + ref + sheet_xml[at + match.end(1):]


def _resolving_elements(archive: zipfile.ZipFile, counted: set[str]) -> int:
    """The XML elements (and comments) of every part openpyxl may read when it loads the workbook
    (every part: it finds them by their relationships, whatever their names) but those `counted`
    already (the sheets written), which join them."""
    count = 0
    for info in archive.infolist():
        if info.filename not in counted:
            data = archive.read(info)
            count += xml_elements(data)
            counted.add(info.filename)
    return count


def write_xlsx(original: bytes, cells: Sequence[Cell], limits: Limits | None = None) -> bytes:
    """The workbook with the answer cells written; every other byte of every other part as it
    was. The sheets written and, to resolve a dropdown's list, the whole workbook are counted
    against `limits.max_file_xml_elements` first (past it, 413)."""
    limits = limits or Limits()
    # XML elements are counted against max_file_xml_elements as an import counts them: a kept
    # file within the import's count may still hold elements it never read (after a sheet's rows,
    # comments, sheets not looked at), and resolving a dropdown's list loads every part (a sheet
    # of 5 million empty cells, 121 KB, took 20 s; 3.5 million comments before a sheet's rows,
    # 40 KB, 11.6 s). Counted in the text, `<` less `</`, before it is searched.
    tally = Tally()
    counted: set[str] = set()  # the parts counted: the sheets written, every part once a list is resolved
    by_sheet: dict[str | None, dict[int, dict[int, str]]] = {}
    for cell in cells:
        if cell.text is not None:
            by_sheet.setdefault(cell.sheet, {}).setdefault(cell.row, {})[cell.column] = cell.text
    with zipfile.ZipFile(io.BytesIO(original)) as archive:
        paths = _sheet_paths(archive)
        changed: dict[str, bytes] = {}
        for sheet, rows in by_sheet.items():
            path = paths.get(sheet) if sheet is not None else next(iter(paths.values()), None)
            if path is None or path not in archive.namelist():
                raise ValidationFailed([f"file: the kept workbook has no sheet {sheet!r}"])
            raw = archive.read(path)
            if path not in counted:
                counted.add(path)
                tally.spend(xml_elements(raw), limits, f"the sheet {path!r}")
            xml = raw.decode("utf-8")
            # Excel writes the sheet unprefixed; some generators (the OpenXML SDK) as <x:row> …
            data = next(_tags(xml, "sheetData"), None)
            p = data.prefix if data is not None else ""
            validations = _list_validations(xml)
            resolved: dict[str, list[str]] = {}

            def dropdown(column: int, row: int, text: str,
                         validations: list[_ListValidation] = validations,
                         resolved: dict[str, list[str]] = resolved) -> str | None:
                for validation in validations:
                    if validation.covers(column, row):
                        options = validation.options
                        if options is None:
                            if validation.formula not in resolved:
                                # Every part not counted yet (none after the first list).
                                tally.spend(
                                    _resolving_elements(archive, counted), limits,
                                    f"the workbook, loaded to resolve the list {validation.formula!r}")
                                resolved[validation.formula] = _resolve_list(original, validation.formula)
                            options = resolved[validation.formula]
                        return _dropdown_value(text, options) if options else text
                return text

            xml = _write_rows(xml, rows, dropdown, p)
            xml = _grow_dimension(xml, [(c, r) for r, w in rows.items() for c in w])
            changed[path] = xml.encode("utf-8")
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as target:
            for info in archive.infolist():
                data = changed.get(info.filename)
                if data is None:
                    data = archive.read(info)
                target.writestr(info, data, compress_type=info.compress_type)
    return out.getvalue()


def _write_rows(xml: str, rows: dict[int, dict[int, str]], dropdown: Any, p: str = "") -> str:
    """The sheet with `rows` ({row number: {column: text}}) written: rows it has are written in
    place, the others (a question read from a merged area) inserted in row order before the first
    row numbered after them, else at the end of `<sheetData>`. One pass finds every row."""
    found = _sheet_data(xml, p)
    numbers = [number for number, _ in found.numbered]
    # Rows come in ascending order in any sheet a spreadsheet wrote: then the first row numbered
    # after a missing one is found by bisection. (A linear search for each of 10,000 inserted
    # rows among 20,000 took 1.1 s; a sheet out of order still gets it, bounded by the worker.)
    ascending = all(a < b for a, b in itertools.pairwise(numbers))
    edits: list[tuple[int, int, int, str]] = []  # (start, end, row number, new text)
    inserted: dict[int, list[tuple[int, str]]] = {}  # position → (row number, row)
    for number, writes in rows.items():
        span = found.rows.get(str(number))
        if span is not None:
            start, end = span
            edits.append((start, end, number, _write_row(xml[start:end], number, writes, dropdown, p)))
            continue
        row = _write_row(f'<{p}row r="{number}"></{p}row>', number, writes, dropdown, p)
        if ascending:
            index = bisect.bisect_right(numbers, number)
            before = found.numbered[index][1] if index < len(numbers) else None
        else:
            before = next((start for later, start in found.numbered if later > number), None)
        position = before if before is not None else found.end
        if position is None and found.empty is None:
            continue  # no <sheetData> to put it in
        inserted.setdefault(-1 if position is None else position, []).append((number, row))
    for position, new_rows in inserted.items():
        text = "".join(row for _, row in sorted(new_rows))
        if position >= 0:
            edits.append((position, position, 0, text))
        else:  # <sheetData/>: opened, given the rows, and closed
            start, end = found.empty  # type: ignore[misc]
            tag = xml[start:end][:-2].rstrip()
            edits.append((start, end, 0, f"{tag}>{text}</{p}sheetData>"))
    out = []
    at = 0
    for start, end, _, text in sorted(edits):
        out.append(xml[at:start])
        out.append(text)
        at = end
    out.append(xml[at:])
    return "".join(out)


def write(file: Mapping[str, Any], cells: Sequence[Cell], limits: Limits | None = None) -> bytes:
    content = bytes(file["content"])
    if file["format"] == "xlsx":
        with unforeseen("file: the kept XLSX workbook could not be written back: its XML is "
                        "malformed or its parts do not agree"):
            return write_xlsx(content, cells, limits)
    with unforeseen("file: the kept CSV could not be written back: its CSV structure is malformed"):
        return write_csv(content, cells)


def media_type(file: Mapping[str, Any]) -> str:
    return XLSX_MEDIA_TYPE if file["format"] == "xlsx" else "text/csv"

