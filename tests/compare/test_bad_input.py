"""Bad input exits 2 with one clear line on stderr, never a traceback, before any training."""

from __future__ import annotations

import pytest

from normlab.cli import main


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["tinygpt", "--data", "/nonexistent.txt"], "does not exist"),
        (["nosuchmodel", "--data", "TEXT"], "is not a folder, a reference model"),
        (["tinygpt", "--data", "TEXT", "--norms", "layernorm", "nosuchnorm"], "nosuchnorm"),
        (["tinygpt", "--data", "TEXT", "--norms", "layernorm", "revin"], "series method"),
        (["tinygpt", "--data", "TEXT", "--norms", "layernorm", "quadnorm"], "cannot be swapped"),
        (["tinygpt", "--data", "TEXT", "--norms", "layernorm"], "at least two"),
        (["tinygpt", "--data", "TEXT", "--seeds", "1"], "at least 2"),
        (
            ["tinygpt", "--data", "TEXT", "--reference", "dyt", "--norms", "layernorm", "rmsnorm"],
            "not among",
        ),
        (["forecaster", "--data", "TEXT"], "text"),
        (["tests.compare._toys:nothing", "--data", "TEXT"], "no callable"),
        (
            ["forecaster", "--data", "tests.compare._toys:two_moons", "--task", "forecast"],
            "give a CSV",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(args, says, text_file, capsys):
    args = [str(text_file) if a == "TEXT" else a for a in args]
    rc = main(["compare", *args, "--steps", "2", "--quiet", "--out", "/tmp/never-written"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("normlab compare: error:") and says in err, err
