"""The pipeline demo's cleaning rules and report shape, in one place for Spark and plain Python.

A raw row is kept when its event id and user id are decimal digits, its time
stamp parses as `yyyy-MM-dd HH:mm:ss`, its event type (trimmed, in lower case)
is a known one, it has a URL, and — for a purchase or a refund — its amount is
digits, a point and two digits. Kept rows are normalised: the event type
trimmed and in lower case, the URL trimmed, in lower case, without query
string, fragment or trailing slashes; a purchase adds its amount to revenue,
a refund takes it away.

`kittiwake.demo.transforms` states these rules as Spark expressions over the
patterns below; `clean_row` states them in Python for the check, which must
agree with Spark on every row the generator writes (both read the CSV the
same way: a header line, comma-separated fields, an empty field is null, a
short line has nulls for the missing fields).
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Any, Iterable, Mapping

from kittiwake.demo.dataset import EVENT_TYPES, MONEY_TYPES

ID_PATTERN = r"^[0-9]{1,18}$"
TIME_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$"
SPARK_TIME_PATTERN = "yyyy-MM-dd HH:mm:ss"
AMOUNT_PATTERN = r"^[0-9]{1,9}\.[0-9]{2}$"
URL_TAIL = r"[?#].*$"
_ID = re.compile(ID_PATTERN)
_TIME = re.compile(TIME_PATTERN)
_AMOUNT = re.compile(AMOUNT_PATTERN)
_URL_TAIL = re.compile(URL_TAIL)
_TRAILING_SLASHES = re.compile(r"/+$")
CENT = Decimal("0.01")

# A clean event: (event_id, user_id, event_type, signed amount in cents, url).
CleanRow = tuple[int, int, str, int, str]


def clean_row(fields: list[str]) -> CleanRow | None:
    """The clean event of one CSV row (its fields as the csv module reads them), or None if malformed."""
    event_id, user_id, ts, event_type, amount, url = (list(fields) + [""] * 6)[:6]
    if not (_ID.match(event_id) and _ID.match(user_id) and _TIME.match(ts) and url):
        return None
    try:  # what strptime("%Y-%m-%d %H:%M:%S") checks, five times faster: a real date and time of day
        datetime(int(ts[0:4]), int(ts[5:7]), int(ts[8:10]), int(ts[11:13]), int(ts[14:16]), int(ts[17:19]))
    except ValueError:
        return None
    kind = event_type.strip(" ").lower()
    if kind not in EVENT_TYPES:
        return None
    cents = 0
    if kind in MONEY_TYPES:
        if not _AMOUNT.match(amount):
            return None
        cents = int(amount.replace(".", "")) * (1 if kind == "purchase" else -1)
    page = _TRAILING_SLASHES.sub("", _URL_TAIL.sub("", url.strip(" ").lower()))
    return int(event_id), int(user_id), kind, cents, page


# ------------------------------------------------------------------ the report

Figures = dict[tuple[str, str, str], list[int | Decimal]]  # (dimension, key, detail) -> [events, purchases, revenue]


def add_figures(total: Figures, rows: Iterable[Mapping[str, Any]]) -> Figures:
    """Add figure rows (dicts with the figure columns) into `total`, exactly."""
    for row in rows:
        slot = total.setdefault((row["dimension"], row["key"], row["detail"]), [0, 0, Decimal("0.00")])
        slot[0] += int(row["events"])
        slot[1] += int(row["purchases"])
        slot[2] += Decimal(row["revenue"])
    return total


def figure_rows(figures: Figures) -> list[dict[str, Any]]:
    return [{"dimension": dimension, "key": key, "detail": detail, "events": int(events),
             "purchases": int(purchases), "revenue": Decimal(revenue).quantize(CENT)}
            for (dimension, key, detail), (events, purchases, revenue) in figures.items()]


def report_from_rows(rows: Iterable[Mapping[str, Any]], top: int = 10) -> dict[str, Any]:
    """The printed report from figure rows (all of them, or at least every country/plan and
    event-type row and the top users and pages): plain data, revenue as a string like "12.50"."""
    by_dimension: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_dimension.setdefault(row["dimension"], []).append(row)

    def money(value: Any) -> str:
        return str(Decimal(value).quantize(CENT))

    def record(row: Mapping[str, Any], **names: str) -> dict[str, Any]:
        fields = {name: row[source] for name, source in names.items()}
        return {**fields, "events": int(row["events"]), "purchases": int(row["purchases"]),
                "revenue": money(row["revenue"])}

    country_plan = sorted(by_dimension.get("country_plan", []),
                          key=lambda row: (-Decimal(row["revenue"]), row["key"], row["detail"]))
    event_types = sorted(by_dimension.get("event_type", []), key=lambda row: (-int(row["events"]), row["key"]))
    users = sorted(by_dimension.get("user", []), key=lambda row: (-Decimal(row["revenue"]), int(row["key"])))[:top]
    pages = sorted(by_dimension.get("page", []), key=lambda row: (-int(row["events"]), row["key"]))[:top]
    totals = {"events": sum(int(row["events"]) for row in event_types),
              "purchases": sum(int(row["purchases"]) for row in event_types),
              "revenue": money(sum((Decimal(row["revenue"]) for row in event_types), Decimal("0.00")))}
    return {
        "totals": totals,
        "revenue_by_country_plan": [record(row, country="key", plan="detail") for row in country_plan],
        "events_by_type": [record(row, event_type="key") for row in event_types],
        "top_users": [{**record(row, user_id="key"), "user_id": int(row["key"]), "segment": row["detail"]}
                      for row in users],
        "top_pages": [record(row, url="key") for row in pages],
    }
