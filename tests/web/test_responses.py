from __future__ import annotations

import json
from datetime import UTC, date, datetime

from service.domain.convert import timestamp
from service.web.responses import dumps, json_response


def test_dumps__utc_datetimes_written_as_timestamp_writes_them():
    values = [
        datetime(2026, 11, 21, 20, 51, 50, 959123, tzinfo=UTC),
        datetime(2026, 11, 21, 20, 51, 50, tzinfo=UTC),  # no fraction: none written
        datetime(1999, 1, 2, 3, 4, 5, 1000, tzinfo=UTC),
    ]
    written = json.loads(dumps({"at": values, "day": date(2026, 1, 2)}))
    assert written == {"at": [timestamp(v) for v in values], "day": "2026-01-02"}
    assert written["at"][1] == "2026-11-21T20:51:50Z"


def test_dumps__what_orjson_refuses_falls_back_to_json_with_the_same_timestamps():
    at = datetime(2026, 11, 21, 20, 51, 50, 959123, tzinfo=UTC)
    written = json.loads(dumps({"big": 2**70, "at": at, "day": date(2026, 1, 2)}))
    assert written == {"big": 2**70, "at": timestamp(at), "day": "2026-01-02"}


def test_json_response__utf8_json_as_aiohttp_writes_it():
    response = json_response({"title": "Überprüfung ✓", "n": 1}, status=201)
    assert response.status == 201
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    assert json.loads(response.body) == {"title": "Überprüfung ✓", "n": 1}


def test_dumps__non_string_keys_written_as_strings():
    assert json.loads(dumps({1: "one", "two": 2})) == {"1": "one", "two": 2}
