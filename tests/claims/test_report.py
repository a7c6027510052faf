"""The HTML report and results.json."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser

from normlab.claims import get_claim
from normlab.claims.report import _strict, write_report
from normlab.claims.runner import Runner


def _not_strict(constant: str):
    raise AssertionError(f"results.json holds {constant}, which strict JSON parsers reject")


def test_non_finite_numbers_become_strings():
    nested = {"a": [float("inf"), 1.0, {"b": float("nan"), "c": -float("inf")}], "d": 2}
    assert _strict(nested) == {"a": ["inf", 1.0, {"b": "nan", "c": "-inf"}], "d": 2}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs["id"])
        if tag == "img":
            self.images.append(attrs["src"])


def test_report_has_a_section_and_a_decodable_figure_per_claim(tmp_path, failing_claim):
    claims = [get_claim("affine-rank"), failing_claim]
    results = Runner(tmp_path, jobs=1).run(claims, "quick")
    index = write_report(results, tmp_path, "quick")
    page = _Page()
    page.feed(index.read_text())
    assert page.sections == ["affine-rank", "test-failing-claim"]
    assert page.images, "no figure"
    for src in page.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        assert base64.b64decode(src[len(prefix) :]).startswith(b"\x89PNG\r\n\x1a\n")
    text = index.read_text()
    assert "planted failure" in text  # the traceback of the failed task is shown
    data = json.loads((tmp_path / "results.json").read_text(), parse_constant=_not_strict)
    verdicts = {c["id"]: c["verdict"] for c in data["claims"]}
    assert verdicts["test-failing-claim"] == "error"
    rank = next(c for c in data["claims"] if c["id"] == "affine-rank")
    assert len(rank["tasks"]) == 3 and all(t["measurement"] for t in rank["tasks"])
    assert {e["name"] for e in rank["effects"]} >= {"collapse_without_residual"}
