"""The command line."""

from __future__ import annotations

import re
from pathlib import Path

import normlab
from normlab.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def test_list_shows_every_method(capsys):
    assert main(["list", "--markdown"]) == 0
    out = capsys.readouterr().out
    for method in normlab.methods():
        assert f"| `{method.name}` |" in out


def test_readme_table_matches_the_registry(capsys):
    main(["list", "--markdown"])
    table = capsys.readouterr().out.strip()
    text = README.read_text()
    match = re.search(r"<!-- methods:start -->\n(.*?)\n<!-- methods:end -->", text, re.S)
    assert match, "README lacks the methods table markers"
    assert match.group(1).strip() == table, "README table is stale: run `normlab list --markdown`"


def test_unknown_claim_is_a_clear_error(tmp_path, capsys):
    assert main(["report", "--only", "no-such-claim", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no-such-claim" in err and "affine-rank" in err


def test_unwritable_output_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["report", "--only", "affine-rank", "--out", str(blocker / "x")]) == 2
    assert "Choose another folder" in capsys.readouterr().err


def test_report_smoke_end_to_end(tmp_path, capsys):
    code = main(
        [
            "report",
            "--scale",
            "smoke",
            "--only",
            "affine-rank",
            "--jobs",
            "1",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "index.html" in out and (tmp_path / "index.html").exists()
