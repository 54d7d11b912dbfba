"""Hostile uploads against a running service: generated CSV and XLSX bodies (valid, truncated,
mutated, oversized, zip bombs, XML entity bombs, far rows and columns) posted to the import routes.

What must hold (issue 17): no 5xx; no answer later than the parse time limit allows; and no parse
worker process left running past its time limit. Run by tests/fuzz.py (`make fuzz`) after
schemathesis, whose generated bodies are not files.
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import aiohttp
import attrs

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_WORDS = ["Do", "you", "encrypt", "data", "at", "rest?", "MFA", "=HYPERLINK(\"x\")", "+1", "@SUM",
          "Section", "Question", "é", "中文", "\t", '"quoted"', ";", ",", "\r\n", "\ud7ff"]


@attrs.frozen
class Body:
    kind: str
    data: bytes
    media_type: str
    filename: str | None = None


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def valid_csv(rng: random.Random) -> bytes:
    rows = ["Question,Section"] + [
        f'"{_text(rng, rng.randint(1, 12)).replace(chr(34), chr(34) * 2)}",{rng.choice(["A", "B", ""])}'
        for _ in range(rng.randint(0, 200))
    ]
    return "\n".join(rows).encode("utf-8", "surrogatepass")


def valid_xlsx(rng: random.Random) -> bytes:
    from openpyxl import Workbook
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

    workbook = Workbook()
    sheet = workbook.active
    sheet.append(["ID", "Question", "Section"])
    for number in range(rng.randint(0, 100)):
        sheet.append([f"Q-{number}", ILLEGAL_CHARACTERS_RE.sub("", _text(rng, rng.randint(1, 10))),
                      rng.choice(["Access", None])])
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def _replace_parts(base: bytes, parts: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(base)) as source, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for member in source.infolist():
            target.writestr(member.filename, parts.pop(member.filename, source.read(member.filename)))
        for name, data in parts.items():
            target.writestr(name, data)
    return out.getvalue()


def _sheet(rows: str) -> bytes:
    return (f'<?xml version="1.0"?><worksheet xmlns="{_MAIN}"><sheetData>{rows}</sheetData>'
            "</worksheet>").encode()


def zip_bomb(rng: random.Random) -> bytes:
    """A sheet that unpacks to ~40 MB of one repeated row (a few tens of KB packed)."""
    row = '<row><c t="inlineStr"><is><t>Is data encrypted?</t></is></c></row>'
    return _replace_parts(valid_xlsx(rng), {"xl/worksheets/sheet1.xml": _sheet(row * 600_000)})


def entity_bomb(rng: random.Random, padded: bool) -> bytes:
    """Billion laughs in the shared strings; `padded` hides the DTD behind 100 KB of comment."""
    entities = '<!ENTITY a0 "lol">' + "".join(
        f'<!ENTITY a{i} "{("&a" + str(i - 1) + ";") * 10}">' for i in range(1, 10))
    pad = "<!--" + " " * 100_000 + "-->" if padded else ""
    strings = (f'<?xml version="1.0"?>{pad}<!DOCTYPE sst [{entities}]><sst xmlns="{_MAIN}">'
               f"<si><t>&a9;</t></si></sst>").encode()
    sheet = _sheet('<row r="1"><c r="A1" t="s"><v>0</v></c></row>')
    return _replace_parts(valid_xlsx(rng), {"xl/sharedStrings.xml": strings,
                                            "xl/worksheets/sheet1.xml": sheet})


def far_row(rng: random.Random) -> bytes:
    number = rng.choice([100_001, 20_000_000, 2**31])
    rows = ('<row r="1"><c r="A1" t="inlineStr"><is><t>Question</t></is></c></row>'
            f'<row r="{number}"><c r="A{number}" t="inlineStr"><is><t>Far?</t></is></c></row>')
    return _replace_parts(valid_xlsx(rng), {"xl/worksheets/sheet1.xml": _sheet(rows)})


def far_column(rng: random.Random) -> bytes:
    rows = ('<row r="1"><c r="A1" t="inlineStr"><is><t>Question</t></is></c></row>'
            '<row r="2"><c r="XFD2" t="inlineStr"><is><t>Far?</t></is></c></row>')
    return _replace_parts(valid_xlsx(rng), {"xl/worksheets/sheet1.xml": _sheet(rows)})


def truncated(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randint(0, max(0, len(data) - 1))]


def mutated(data: bytes, rng: random.Random) -> bytes:
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 20)):
        if buffer:
            buffer[rng.randrange(len(buffer))] = rng.randrange(256)
    return bytes(buffer)


def oversized_csv(rng: random.Random) -> bytes:
    choice = rng.choice(["rows", "items", "columns", "cell"])
    if choice == "rows":
        return b"Question,Notes\n" + b",n\n" * 60_000
    if choice == "items":
        return b"Question\n" + b"Q?\n" * 20_000
    if choice == "columns":
        return b"Question," + b",".join(b"c%d" % i for i in range(300)) + b"\nQ?\n"
    return b"Question\n" + b"x" * 200_000 + b"\n"


GENERATORS: list[tuple[str, Callable[[random.Random], Body]]] = [
    ("valid csv", lambda r: Body("valid csv", valid_csv(r), "text/csv")),
    ("valid xlsx", lambda r: Body("valid xlsx", valid_xlsx(r), XLSX, "q.xlsx")),
    ("nul csv", lambda r: Body("nul csv", valid_csv(r) + b"\nIs\x00it?\n", "text/csv")),
    ("truncated csv", lambda r: Body("truncated csv", truncated(valid_csv(r), r), "text/csv")),
    ("truncated xlsx", lambda r: Body("truncated xlsx", truncated(valid_xlsx(r), r), XLSX)),
    ("mutated xlsx", lambda r: Body("mutated xlsx", mutated(valid_xlsx(r), r), XLSX)),
    ("mutated csv", lambda r: Body("mutated csv", mutated(valid_csv(r), r), "text/csv")),
    ("oversized csv", lambda r: Body("oversized csv", oversized_csv(r), "text/csv")),
    ("zip bomb", lambda r: Body("zip bomb", zip_bomb(r), XLSX)),
    ("entity bomb", lambda r: Body("entity bomb", entity_bomb(r, padded=False), XLSX)),
    ("padded entity bomb", lambda r: Body("padded entity bomb", entity_bomb(r, padded=True), XLSX)),
    ("far row", lambda r: Body("far row", far_row(r), XLSX)),
    ("far column", lambda r: Body("far column", far_column(r), XLSX)),
    ("random bytes", lambda r: Body("random bytes", r.randbytes(r.randint(0, 4096)),
                                    r.choice(["text/csv", XLSX, "application/octet-stream"]))),
]


def descendants(pid: int) -> dict[int, str]:
    """{pid: command line} of every process below `pid` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: dict[int, str] = {}
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found[child] = commands.get(child, "")
            stack.append(child)
    return found


def parse_workers(service_pid: int) -> set[int]:
    """The parse children now running: below the service, neither the fork server nor
    multiprocessing's resource tracker."""
    return {pid for pid, command in descendants(service_pid).items()
            if "forkserver" not in command and "resource_tracker" not in command}


async def run(base_url: str, token: str, service_pid: int, *, seconds: float, seed: int,
              parse_timeout: float) -> list[str]:
    """Post generated bodies for `seconds`; the problems found (empty: none)."""
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {token}"}
    problems: list[str] = []
    counts: dict[str, int] = {}
    # An answer may wait for a worker (up to the limit) and then parse (up to the limit).
    allowed = 2 * parse_timeout + 10
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(f"{base_url}/api/v1/rfps", json={"rfp": {"title": "Upload fuzz"}}) as r:
            rfp_id = (await r.json())["id"]
        deadline = time.monotonic() + seconds
        index = 0
        while time.monotonic() < deadline or index < len(GENERATORS):
            name, generate = GENERATORS[index % len(GENERATORS)] if index < len(GENERATORS) \
                else rng.choice(GENERATORS)
            index += 1
            body = await asyncio.to_thread(generate, rng)
            route = rng.choice(["import", "import", "multipart", "kb"])
            started = time.monotonic()
            try:
                status = await _post(session, base_url, rfp_id, body, route)
            except (aiohttp.ClientError, TimeoutError) as exc:
                problems.append(f"{name} via {route}: {type(exc).__name__} {exc}")
                continue
            took = time.monotonic() - started
            counts[f"{name} → {status}"] = counts.get(f"{name} → {status}", 0) + 1
            if status >= 500:
                problems.append(f"{name} via {route}: HTTP {status}")
            if took > allowed:
                problems.append(f"{name} via {route}: answered after {took:.1f} s (> {allowed:g} s)")
    # Every parse worker is gone within its time limit once the last answer is in.
    wait_until = time.monotonic() + parse_timeout + 5
    while (left := parse_workers(service_pid)) and time.monotonic() < wait_until:  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    if left:
        problems.append(f"parse workers still running after their time limit: {sorted(left)}")
    for outcome, count in sorted(counts.items()):
        print(f"  {count:4d} × {outcome}")
    return problems


async def _post(session: aiohttp.ClientSession, base_url: str, rfp_id: str, body: Body,
                route: str) -> int:
    timeout = aiohttp.ClientTimeout(total=120)
    if route == "kb":
        url, data, headers = f"{base_url}/api/v1/knowledge_base_items/import", body.data, \
            {"Content-Type": "text/csv"}
    elif route == "multipart":
        form = aiohttp.FormData()
        form.add_field("file", body.data, content_type=body.media_type, filename=body.filename or "f")
        url, data, headers = f"{base_url}/api/v1/rfps/{rfp_id}/rfp_items/import", form, {}
    else:
        url, data, headers = f"{base_url}/api/v1/rfps/{rfp_id}/rfp_items/import", body.data, \
            {"Content-Type": body.media_type}
    async with session.post(url, data=data, headers=headers, timeout=timeout) as response:
        await response.read()
        return response.status


if __name__ == "__main__":  # for a quick look against a running service: URL TOKEN PID
    import sys

    found = asyncio.run(run(sys.argv[1], sys.argv[2], int(sys.argv[3]), seconds=20,
                            seed=int(os.environ.get("SEED", "1")), parse_timeout=30))
    print("\n".join(found) or "no problems")
