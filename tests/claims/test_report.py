"""The report: results.json (schema, structured numbers), why-lines, HTML, --only merge."""

from __future__ import annotations

import html
import json
import math
from html.parser import HTMLParser

import pytest

from normlab.claims import core as claims_core
from normlab.claims._format import fmt_estimate
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
    # rounded bounds never exclude their own mean (15.06 and 15.28 are not "[15, 15]")
    assert fmt_interval(15.06, 15.28, mean=15.17) == "[15.1, 15.3]"
    assert fmt_estimate(15.17, 15.06, 15.28, "decades") == "+15.2 decades [15.1, 15.3]"


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
    assert (ok.get("premises") or ok.get("preconditions"))[0]["held"] is True
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


def test_index_links_one_page_per_claim_with_figure_caption_and_why(report):
    index, data, claims = report
    text = index.read_text()
    for c in claims.values():
        assert f'href="claims/{c["id"]}.html"' in text
        assert html.escape(c["why"]) in text.replace("<wbr>", "")  # in the summary row
    assert "data:image" not in text and "<section" not in text  # the index stays short
    assert f"torch {data['torch']}" in text and "CPU cores" in text
    assert "pts" in text  # the primary effect's unit
    assert "Sources of the margins" in text
    for c in claims.values():
        claim_page = (index.parent / "claims" / f"{c['id']}.html").read_text()
        parsed = _Page()
        parsed.feed(claim_page)
        assert parsed.sections == [c["id"]]
        assert html.escape(c["why"]) in claim_page.replace("<wbr>", "")
        for src in parsed.images:  # figures are files next to the report
            png = (index.parent / "claims" / src).resolve()
            assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
            assert parsed.captions == len(parsed.images)
    ok = (index.parent / "claims" / "planted-ok.html").read_text()
    assert "look at the planted dots" in ok  # the claim's caption
    assert "the planted claim runs one variant at quick scale" in ok  # scale_note
    assert "class='card'" in ok and html.escape("margin's source") in ok
    assert "planted failure" in (index.parent / "claims" / "planted-fails.html").read_text()
    broken = (index.parent / "claims" / "planted-check-fails.html").read_text()
    assert "verified" in ok and "FAILED" in broken
    for page_text in [text, ok, broken]:
        assert not any(ord(ch) > 0x2FFF for ch in page_text)  # no emoji, CSS marks instead
    assert "Smoke proves the pipeline" not in text  # no banner at quick scale
    assert "not run" in text and "normlab report --only planted-ok --robustness" in text
    assert "Nothing is tuned: a planted claim trains nothing" in html.unescape(ok)


def test_a_broken_figure_shows_an_error_box_and_is_logged(tmp_path, planted, monkeypatch, caplog):
    import dataclasses

    claim = planted["planted-ok"]

    def broken(measurements):
        raise RuntimeError("no such curve")

    bad = dataclasses.replace(claim, figure=broken)
    results = ClaimRunner(tmp_path, jobs=1).run([bad], "quick")
    with caplog.at_level("WARNING"):
        index = write_report(results, tmp_path)
    page_text = (index.parent / "claims" / "planted-ok.html").read_text()
    assert "error-box" in page_text and "no such curve" in page_text
    assert "<img" not in page_text
    assert any(
        "planted-ok" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records
    )


def _merge_in_child(out: str, claim_id: str) -> None:
    """Child of the lock test: judge one planted claim and merge it into ``out``, slowly."""
    import time

    from normlab.claims import report as report_module
    from tests.claims import _planted

    claim = next(c for c in _planted.ALL if c.id == claim_id)
    original = report_module._read_old

    def slow_read(path):
        old = original(path)
        time.sleep(0.6)  # without the lock, both runs read results.json before either writes
        return old

    report_module._read_old = slow_read
    results = ClaimRunner(out, jobs=1).run([claim], "quick")
    write_report(results, out, merge=True)


def test_two_concurrent_merges_both_land(tmp_path):
    import multiprocessing

    context = multiprocessing.get_context("fork")
    ids = ["planted-ok", "planted-untestable"]
    children = [context.Process(target=_merge_in_child, args=(str(tmp_path), i)) for i in ids]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    merged = json.loads((tmp_path / "results.json").read_text())
    assert sorted(c["id"] for c in merged["claims"]) == ids
    assert {p.stem for p in (tmp_path / "claims").glob("*.html")} == set(ids)


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
    assert 'href="claims/planted-untestable.html"' in text and "claims/planted-ok.html" in text
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


def test_run_shows_progress_when_asked_and_accepts_underscores(
    tmp_path, planted, monkeypatch, capsys
):
    import normlab.claims

    monkeypatch.setattr(claims_core._CATALOGUE, "loaded", True)
    report = normlab.claims.run(["planted_ok"], scale="smoke", jobs=1, out=tmp_path, progress=True)
    err = capsys.readouterr().err
    assert "planted-ok" in err and "all (smoke)" in err and "ETA" in err
    assert list(report.verdicts) == ["planted-ok"]
    normlab.claims.run(["planted-ok"], scale="smoke", jobs=1, out=tmp_path)
    assert capsys.readouterr().err == ""  # no bars unless asked


def test_report_and_report_html_do_not_import_each_other():
    import ast
    from pathlib import Path

    import normlab.claims.report_html as report_html

    tree = ast.parse(Path(report_html.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
    }
    assert "normlab.claims.report" not in imported  # formatting lives in claims._format


def test_a_kept_record_from_older_code_is_marked_stale(tmp_path, planted, monkeypatch):
    import normlab._sources as sources
    import normlab.claims

    monkeypatch.setattr(claims_core._CATALOGUE, "loaded", True)  # only the planted claims
    normlab.claims.run(["planted-ok", "planted-untestable"], "smoke", jobs=1, out=tmp_path)
    real = sources.read_source

    def edited(path):  # the planted claims' module changes after the first run
        data = real(path)
        return data + b"\n# edited\n" if str(path).endswith("_planted.py") else data

    monkeypatch.setattr(sources, "read_source", edited)
    normlab.claims.run(["planted-untestable"], "smoke", jobs=1, out=tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    by_id = {c["id"]: c for c in data["claims"]}
    assert by_id["planted-ok"].get("stale") is True
    assert by_id["planted-ok"]["why"].startswith("STALE")
    assert not by_id["planted-untestable"].get("stale")  # just recomputed
    validate(data)


def test_report_robustness_flag_records_the_neighbours(tmp_path, planted, monkeypatch):
    from normlab.cli import main

    monkeypatch.setattr(claims_core._CATALOGUE, "loaded", True)
    args = ["report", "--scale", "quick", "--jobs", "1", "--no-progress", "--out", str(tmp_path)]
    assert main([*args, "--only", "planted-ok", "--robustness"]) == 0
    (record,) = json.loads((tmp_path / "results.json").read_text())["claims"]
    flips = {(r["setting"], r["value"]): r["flips"] for r in record["robustness"]}
    # the free setting's reruns, and the margin (normlab's choice) re-judged at half, double
    assert flips == {
        ("offset", -2.0): True,
        ("offset", 0.5): False,
        ("margin", 0.25): False,
        ("margin", 1.0): True,
    }
    kinds = [t["kind"] for t in record["tasks"]]
    assert kinds.count("seed") == 3 and kinds.count("neighbour") == 6  # reruns stored apart
    page = html.unescape((tmp_path / "claims" / "planted-ok.html").read_text())
    assert "Robustness" in page and "flips the verdict" in page
    assert "fragile at offset=-2" in page
    # the main seeds score 1.0, 1.1, 1.2 (mean 1.1); offset -2 would pull a pooled mean below 0
    measurements = page[page.index("<h3>Measurements</h3>") : page.index("Robustness reruns")]
    assert "1.1 ± 0.1" in measurements and "-0.9" not in measurements
    assert "offset=-2 (3 seeds)" in page[page.index("Robustness reruns") :]
    index = html.unescape((tmp_path / "index.html").read_text())
    assert "fragile at offset=-2" in index


def test_claim_command_at_one_seed_says_no_interval_not_failed(
    tmp_path, planted, monkeypatch, capsys
):
    from normlab.cli import main

    monkeypatch.setattr(claims_core._CATALOGUE, "loaded", True)
    args = ["claim", "planted-ok", "--scale", "smoke", "--out", str(tmp_path), "--no-progress"]
    main(args)
    text = capsys.readouterr().out
    assert "premise baseline_ranked" in text and "one seed: no interval" in text
    assert "FAILED" not in text
    assert " s wall, " in text and " s CPU" in text  # each task's two times, labelled


def _premise(name, mean, low, high, **kw):
    record = {"name": name, "description": f"{name} measure", "mean": mean, "low": low}
    record |= {"high": high, "direction": "no_greater", "margin": 0.1, "held": False}
    return record | {"state": "failed", "gates": ["x"]} | kw


def test_an_untestable_why_line_groups_the_arms_not_shown_converged():
    from normlab.claims.report import WHY_PREMISES, why_line

    under = [_premise(f"arm{k}_converged", 0.3 + k / 100, 0.2, 0.4) for k in range(5)]
    record = {
        "verdict": "untestable",
        "reason": "untestable at this scale",
        "primary": "x",
        "effects": [{"name": "x", "role": "primary", "values": [1.0, 1.1]}],
        "premises": under,
    }
    why = why_line(record)
    assert why.count("not shown converged") == 1 and "needs < 0.1" in why
    assert all(f"arm{k} 0.3" in why for k in range(5)), why  # every arm named with its share
    # other premises are named one by one, at most WHY_PREMISES phrases in all
    others = [_premise(f"p{k}", 1.0, 0.9, 1.1, direction="greater", margin=2.0) for k in range(5)]
    why = why_line({**record, "premises": others + under})
    assert f"{5 + 1 - WHY_PREMISES} more premise(s) listed below" in why, why
    assert why.count("was 1") == WHY_PREMISES
