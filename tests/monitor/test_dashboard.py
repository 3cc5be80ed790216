"""The shipped Grafana dashboard: generated from code, structurally valid, covering every metric."""

from __future__ import annotations

import json
import re

import pytest

from kilorl.monitor.dashboard import DASHBOARD_PATH, PANELS, UID
from kilorl.monitor.metrics import METRICS

PANEL_TYPES = {"timeseries", "stat", "gauge", "table", "row", "text", "heatmap", "bargauge"}


@pytest.fixture(scope="module")
def shipped() -> dict:
    return json.loads(DASHBOARD_PATH.read_text())


def test_regenerating_the_dashboard_gives_the_committed_file():
    pytest.importorskip("grafanalib")
    from kilorl.monitor.dashboard import dashboard_json

    assert dashboard_json() == DASHBOARD_PATH.read_text(), "run `python -m kilorl.monitor.dashboard` and commit the result"


def schema_errors(d: dict) -> list[str]:
    """The essentials Grafana's dashboard schema requires of an importable dashboard."""
    errs = []
    for key, typ in (("title", str), ("uid", str), ("panels", list), ("schemaVersion", int), ("templating", dict),
                     ("time", dict), ("editable", bool)):
        if not isinstance(d.get(key), typ):
            errs.append(f"dashboard.{key} must be {typ.__name__}")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", d.get("uid") or ""):
        errs.append("dashboard.uid must be 1-40 of [A-Za-z0-9_-]")
    ids, cells = set(), set()
    for i, p in enumerate(d.get("panels", [])):
        where = f"panels[{i}] ({p.get('title')!r})"
        if p.get("id") in ids or not isinstance(p.get("id"), int):
            errs.append(f"{where}.id must be a unique int")
        ids.add(p.get("id"))
        if p.get("type") not in PANEL_TYPES:
            errs.append(f"{where}.type {p.get('type')!r} is not a Grafana panel type")
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "hwxy") or g["x"] + g["w"] > 24 or g["w"] < 1 or g["h"] < 1:
            errs.append(f"{where}.gridPos must be ints inside the 24-column grid")
            continue
        cover = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        if cover & cells:
            errs.append(f"{where} overlaps another panel")
        cells |= cover
        refs = [t.get("refId") for t in p.get("targets", [])]
        if not refs or len(set(refs)) != len(refs) or not all(t.get("expr") for t in p["targets"]):
            errs.append(f"{where}.targets need an expr and distinct refIds")
    for v in d.get("templating", {}).get("list", []):
        if not (v.get("name") and v.get("type") == "query" and v.get("query")):
            errs.append(f"templating variable {v.get('name')!r} needs a name and a query")
    return errs


def test_the_shipped_dashboard_has_grafanas_essential_structure(shipped):
    assert schema_errors(shipped) == []
    assert shipped["uid"] == UID and len(shipped["panels"]) == len(PANELS)
    assert {v["name"] for v in shipped["templating"]["list"]} == {"role", "node"}


def test_the_schema_check_catches_a_broken_dashboard(shipped):
    broken = json.loads(json.dumps(shipped))
    broken["panels"][1]["gridPos"] = dict(broken["panels"][0]["gridPos"])
    broken["panels"][2]["id"] = broken["panels"][3]["id"]
    del broken["panels"][4]["targets"][0]["expr"]
    errs = schema_errors(broken)
    assert any("overlaps" in e for e in errs) and any("unique int" in e for e in errs) and any("expr" in e for e in errs)


def test_every_metric_appears_in_some_panel_query():
    exprs = " ".join(q for p in PANELS for q, _ in p.queries)
    missing = [m.name for m in METRICS if m.name not in exprs]
    assert missing == []


def test_every_query_filters_by_the_dashboard_variables():
    for p in PANELS:
        for expr, _ in p.queries:
            if "kilorl_" in expr:
                assert '$role' in expr and '$node' in expr, p.title
