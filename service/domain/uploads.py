"""Reading uploaded files: what one upload may hold, and the one CSV reader under both CSV parsers
(`knowledge.parse_knowledge_csv` for knowledge-base imports, `questionnaires.parse_questionnaire_csv`
for questionnaires).

The CSV reader decodes the bytes (UTF-8, then whichever fallback encodings the parser allows;
every BOM the text opens with dropped), guesses the delimiter from the opening lines unless the
parser fixes the dialect, and yields each record with its 1-based row number. Past a limit the whole file is
refused (413 naming the setting); a NUL character, which PostgreSQL text cannot hold, is a 422
naming the cell; broken quoting is a `NotCsv` (422) naming the row.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Callable, Iterator
from itertools import chain, islice
from typing import IO, Any, TypeVar

import attrs

from ..config import UploadsConfig
from .errors import PayloadTooLarge, ServiceError, ValidationFailed

T = TypeVar("T")


@attrs.frozen(kw_only=True)
class Limits:
    """What one upload may hold (config [uploads], SECURITY.md "Uploads"). A file past any of
    them is refused whole with 413 naming the setting, before anything is stored."""

    max_zip_member_bytes: int = 26_214_400  # uncompressed size of each part of an XLSX
    max_rows: int = 50_000  # rows (records) read, empty ones included
    max_columns: int = 256
    max_row_index: int = 100_000  # the highest row number an XLSX may name (<row r="…">)
    max_cell_chars: int = 100_000
    max_items: int = 10_000  # questions one import may add
    max_shared_strings: int = 500_000  # strings in an XLSX's shared strings table
    max_xml_elements: int = 200_000  # in each XLSX part read whole at opening (workbook, styles …)
    max_text_chars: int = 50_000_000  # in all the cells read from one file, a shared string each time
    max_file_xml_elements: int = 600_000  # read from one XLSX: every part and every sheet's rows walked

    @classmethod
    def of(cls, uploads: UploadsConfig) -> Limits:
        return cls(**{field.name: getattr(uploads, field.name) for field in attrs.fields(cls)})

    def refuse(self, what: str, setting: str) -> PayloadTooLarge:
        limit = f"uploads.{setting} = {getattr(self, setting)}"
        return PayloadTooLarge(f"the file is over a limit ({limit}); nothing was imported",
                               details=[f"file: {what}; the limit is {limit}"])


class Unforeseen(Exception):
    """An exception of a worker's function that no check of it foresaw (a malformed file the
    parser trips on, or a bug), raised by `unforeseen` from the original. The client is told
    `detail` (422), never the exception's own text; the log gets the original's traceback."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


# What a client is told when a function did not say what it was reading (`unforeseen`).
UNFORESEEN = "file: not readable: its structure is malformed"


@contextlib.contextmanager
def unforeseen(detail: str) -> Iterator[None]:
    """In a worker's function: any exception raised within but a ServiceError (meant for the
    client as it is) and a MemoryError or RecursionError (reported as the limits they are)
    becomes an `Unforeseen(detail)`, so the client reads what was wrong in the terms of the
    file's format, e.g. "file: not a readable XLSX workbook: …"."""
    try:
        yield
    except (ServiceError, MemoryError, RecursionError, Unforeseen):
        raise
    except Exception as exc:
        raise Unforeseen(detail) from exc


class NotCsv(ValidationFailed):
    """Row `row` breaks the CSV quoting; the reader cannot go on past it."""

    def __init__(self, row: int, error: csv.Error) -> None:
        super().__init__([f"file: row {row} is not valid CSV: {error}"], message="the file is not valid CSV")
        self.row = row
        self.error = error


def column_letter(index: int) -> str:
    """0 → A, 25 → Z, 26 → AA."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


@attrs.define
class Tally:
    """What has been read so far from one file. `chars`: the characters of its cells
    (`Limits.max_text_chars`); a CSV holds at most as many as its bytes, but an XLSX cell names a
    shared string by its index, so 55 KB naming one string of 100,000 characters 10,000 times
    made 1 GB of questions (the service process grew by 2.9 GB storing them). `elements`: the XML
    elements of an XLSX's parts and sheets walked (`Limits.max_file_xml_elements`), each costing
    the parser 2-4 µs however small it zips."""

    chars: int = 0
    elements: int = 0

    def spend(self, elements: int, limits: Limits, where: str) -> None:
        """Count `elements` more XML elements read from the file, `where` saying by what."""
        self.elements += elements
        if self.elements > limits.max_file_xml_elements:
            raise too_many_elements(limits, where)


def too_many_elements(limits: Limits, where: str) -> PayloadTooLarge:
    """The refusal of a file past `Limits.max_file_xml_elements`, reached by `where`."""
    return limits.refuse(f"more than {limits.max_file_xml_elements} XML elements read from its parts "
                         f"and sheets, by {where}", "max_file_xml_elements")


def checked_row(number: int, cells: list[str], limits: Limits, tally: Tally) -> list[str]:
    """A row's cells, refused (the whole file) past a limit or with a NUL character, which
    PostgreSQL text cannot hold; their characters are added to `tally`, the file's."""
    if len(cells) > limits.max_columns:
        raise limits.refuse(f"row {number} has {len(cells)} columns", "max_columns")
    for index, cell in enumerate(cells):
        if len(cell) > limits.max_cell_chars:
            raise limits.refuse(
                f"cell {column_letter(index)}{number} holds {len(cell)} characters", "max_cell_chars"
            )
        tally.chars += len(cell)
        if tally.chars > limits.max_text_chars:
            raise limits.refuse(f"its cells hold more than {limits.max_text_chars} characters by row "
                                f"{number}", "max_text_chars")
        if "\x00" in cell:
            raise ValidationFailed(
                [f"file: cell {column_letter(index)}{number} holds a NUL character; save the file "
                 "as UTF-8 text (a UTF-16 file reads this way)"],
                message="the file holds characters that cannot be stored",
            )
    return cells


BOM = "\ufeff"

_SNIFF_LINES = 20
_SNIFF_BYTES = 8 * 1024


def csv_records(text: IO[str], limits: Limits, dialect: Any = None) -> Iterator[tuple[int, list[str]]]:
    """Each record of a seekable text stream as (row number, cells), checked against `limits`.
    Without a `dialect` the delimiter (`,` `;` tab or `|`) is guessed from the opening lines."""
    if dialect is None:
        # Guessed from the opening lines only: csv.Sniffer's time grows faster than its sample
        # (64 KB of one short line repeated took 3.4 s; 8 KB takes 0.4 s).
        sample = "".join(islice(iter(lambda: text.readline(_SNIFF_BYTES), ""), _SNIFF_LINES))[:_SNIFF_BYTES]
        text.seek(0)
        try:
            dialect = csv.Sniffer().sniff(sample.lstrip(BOM), delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel
    # The csv module's own bound (131,072 by default), set to ours: a longer cell stops the
    # reader instead of being read whole first. (Process-wide; uploads parse in a worker.)
    csv.field_size_limit(max(limits.max_cell_chars, 1))
    # Every BOM the file opens with is dropped: the UTF-8 decoder drops one, and a file saved
    # twice by a tool that adds its own keeps the second in its first header, which then names
    # no known column.
    lines = iter(text)
    reader = csv.reader(chain([next(lines, "").lstrip(BOM)], lines), dialect)
    number = 0
    tally = Tally()
    try:
        for number, record in enumerate(reader, start=1):
            if number > limits.max_rows:
                raise limits.refuse(f"more than {limits.max_rows} rows", "max_rows")
            yield number, checked_row(number, record, limits, tally)
    except csv.Error as exc:
        if "field larger than field limit" in str(exc):
            raise limits.refuse(f"row {number + 1} holds a cell longer than {limits.max_cell_chars} "
                                "characters", "max_cell_chars") from None
        raise NotCsv(number + 1, exc) from None


_ENCODING_NAMES = {"utf-8-sig": "UTF-8", "cp1252": "Windows-1252"}


def read_csv(
    binary: IO[bytes], limits: Limits, parse: Callable[[Iterator[tuple[int, list[str]]]], T], *,
    encodings: tuple[str, ...] = ("utf-8-sig",), dialect: Any = None,
) -> T:
    """`parse` over the records of a seekable binary CSV, decoded with the first of `encodings`
    that reads the whole file (streamed: a file that is not the first is read again)."""
    for encoding in encodings:
        binary.seek(0)
        text = io.TextIOWrapper(binary, encoding=encoding, errors="strict", newline="")
        try:
            return parse(csv_records(text, limits, dialect))
        except UnicodeDecodeError:
            continue
        finally:
            text.detach()
    names = " nor ".join(_ENCODING_NAMES.get(e, e) for e in encodings)
    raise ValidationFailed([f"file: the text is not {names}" if len(encodings) == 1
                            else f"file: the text is neither {names}"],
                           message="the file could not be read")


def decode(raw: bytes) -> str:
    """An uploaded CSV's bytes as text: UTF-8, every BOM it opens with dropped."""
    try:
        return raw.decode("utf-8-sig").lstrip(BOM)
    except UnicodeDecodeError:
        raise ValidationFailed(["file: the text is not UTF-8; save the file as UTF-8 CSV"],
                               message="the file could not be read") from None
