"""The report: results.json (schema, structured numbers), why-lines, HTML, --only merge."""

from __future__ import annotations

import base64
import html
import json
import math
from html.parser import HTMLParser

import pytest

from normlab.claims import core as claims_core
from normlab.claims.report import fmt_interval, fmt_se, fmt_value, write_report
from normlab.claims.runner import ClaimRunner
from normlab.claims.schema import SCHEMA_VERSION, decode, encode, schema, validate

jsonschema = pytest.importorskip("jsonschema")


def _not_strict(constant: str):
    raise AssertionError(f"results.json holds {constant}, which strict JSON parsers reject")


def test_non_finite_numbers_are_null_with_a_flag_and_round_trip():
    nested = {"a": [math.inf, 1.0, {"b": math.nan, "c": -math.inf}], "d": 2}
    encoded = encode(nested)
    assert encoded["a"][0] == {"value": None, "nonfinite": "inf"}
    assert encoded["a"][2]["c"] == {"value": None, "nonfinite": "-inf"}
    json.loads(json.dumps(encoded), parse_constant=_not_strict)
    back = decode(encoded)
    assert back["a"][0] == math.inf and math.isnan(back["a"][2]["b"]) and back["d"] == 2


def test_number_formats():
    assert fmt_value(3.0) == "3" and fmt_value(1.0, signed=True) == "+1"
    assert fmt_value(0.123456) == "0.123" and fmt_se(0.0123456) == "0.012"
    assert fmt_interval(1.0, 1.0) == "[1, 1]" and fmt_interval(0.0123, 0.98765) == "[0.012, 0.99]"
    assert fmt_interval(-math.inf, math.inf) == "no interval"


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.images: list[str] = []
        self.captions = 0
        self._in_caption = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs["id"])
        if tag == "img":
            self.images.append(attrs["src"])
        if tag == "figcaption":
            self.captions += 1


@pytest.fixture
def report(tmp_path, planted):
    ids = ["planted-ok", "planted-untestable", "planted-check-fails", "planted-fails"]
    claims = [planted[i] for i in ids]
    results = ClaimRunner(tmp_path, jobs=1).run(claims, "quick")
    index = write_report(results, tmp_path)
    data = json.loads((tmp_path / "results.json").read_text(), parse_constant=_not_strict)
    return index, data, {c["id"]: c for c in data["claims"]}


def test_results_json_follows_the_packaged_schema(report):
    _, data, _ = report
    assert data["schema_version"] == SCHEMA_VERSION
    validate(data)
    jsonschema.Draft202012Validator.check_schema(schema())
    broken = json.loads(json.dumps(data))
    broken["claims"][0]["effects"][0]["mean"] = "1.0"  # a pre-formatted number
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_records_hold_structured_numbers_and_verdicts(report):
    _, data, claims = report
    ok = claims["planted-ok"]
    assert ok["verdict"] == "supported" and ok["primary"] == "score_gap"
    primary = ok["effects"][0]
    assert primary["role"] == "primary" and primary["values"] == pytest.approx([1.0, 1.1, 1.2])
    assert primary["on_claimed_side"] == 3 and not primary["degenerate"]
    assert ok["effects"][1]["degenerate"] is True  # rank gap 1 in every seed
    assert [c["status"] for c in ok["checks"]] == ["verified"]
    assert ok["preconditions"][0]["held"] is True
    curve = ok["tasks"][0]["measurement"]["curves"]["loss"]
    assert curve[1] == {"value": None, "nonfinite": "inf"}
    assert [t["kind"] for t in ok["tasks"]] == ["seed", "seed", "seed", "checks"]
    assert claims["planted-untestable"]["verdict"] == "untestable"
    assert claims["planted-check-fails"]["verdict"] == "error"
    assert claims["planted-fails"]["verdict"] == "error"
    assert data["machine"]["cpus"] >= 1 and data["torch"]


def test_why_lines_name_the_deciding_effect_and_what_was_missing(report):
    _, _, claims = report
    why = claims["planted-ok"]["why"]
    assert why.startswith("Supported: method minus baseline score was +1.1 pts [")
    assert "3 of 3 seeds on the claimed side, > 0.5" in why
    untestable = claims["planted-untestable"]["why"]
    assert "Untestable at this scale" in untestable and "needs >= 10" in untestable
    assert "was 2" in untestable  # the measured value, as an integer
    assert "broken" in claims["planted-check-fails"]["why"]
    assert "3 task(s) failed" in claims["planted-fails"]["why"]
    assert all("mixed signs" not in c["why"] for c in claims.values())


def test_page_has_sections_figures_captions_header_and_why(report):
    index, data, claims = report
    text = index.read_text()
    page = _Page()
    page.feed(text)
    assert page.sections == list(claims)  # in the order run
    assert page.images and page.captions == len(page.images)
    for src in page.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        assert base64.b64decode(src[len(prefix) :]).startswith(b"\x89PNG\r\n\x1a\n")
    for c in claims.values():
        assert html.escape(c["why"]) in text
    assert "look at the planted dots" in text  # the claim's caption
    assert "the planted claim runs one variant at quick scale" in text  # scale_note
    assert f"torch {data['torch']}" in text and "CPU cores" in text
    assert "planted failure" in text  # the traceback of a failed task
    assert '<div class="scroll">' in text
    assert "✅ verified" in text and "❌ failed" in text
    assert "Smoke proves the pipeline" not in text  # no banner at quick scale


def test_smoke_report_carries_the_banner(tmp_path, planted):
    results = ClaimRunner(tmp_path, jobs=1).run([planted["planted-ok"]], "smoke")
    text = write_report(results, tmp_path).read_text()
    assert "Smoke proves the pipeline, not the claim" in text
    data = json.loads((tmp_path / "results.json").read_text())
    assert "no interval" in data["claims"][0]["why"]


def test_only_merges_into_the_existing_report(tmp_path, planted, monkeypatch, capsys):
    from normlab.cli import main

    monkeypatch.setattr(claims_core._CATALOGUE, "loaded", True)  # only the planted claims
    base = ["report", "--scale", "quick", "--jobs", "1", "--no-progress", "--out", str(tmp_path)]
    assert main([*base, "--only", "planted-ok", "planted-untestable"]) == 0
    first = json.loads((tmp_path / "results.json").read_text())
    assert main([*base, "--only", "planted-ok"]) == 0
    merged = json.loads((tmp_path / "results.json").read_text())
    assert [c["id"] for c in merged["claims"]] == ["planted-ok", "planted-untestable"]
    assert merged["claims"][1] == first["claims"][1]  # kept as it was
    validate(merged)
    text = (tmp_path / "index.html").read_text()
    assert 'id="planted-untestable"' in text and 'id="planted-ok"' in text
    assert "merged 1 claim(s)" in capsys.readouterr().out


def test_claim_command_says_where_it_writes(tmp_path, planted, monkeypatch, capsys):
    from normlab.cli import main

    monkeypatch.setattr(claims_core._CATALOGUE, "loaded", True)
    out = tmp_path / "r"
    assert (
        main(["claim", "planted-ok", "--scale", "quick", "--out", str(out), "--no-progress"]) == 0
    )
    text = capsys.readouterr().out
    assert str(out / "tasks") in " ".join(text.split()).replace(" ", "") or "tasks" in text
    assert "Supported:" in text and "verdict: supported" in text
    assert (
        main(
            [
                "claim",
                "planted-check-fails",
                "--scale",
                "quick",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 1
    )
