"""A script without ``if __name__ == "__main__":`` runs the main job (no spawned worker
would survive re-running it), and the README's example does so saved as a script."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from normlab.claims import _workers
from tests.claims._cli_toys import TIMEOUT

README = Path(__file__).resolve().parents[2] / "README.md"


def _main_job_example() -> str:
    """The README's "main job from Python" code block, as written there."""
    text = README.read_text()
    section = text.split("### The main job from Python", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)[:1]
    return code


@pytest.mark.parametrize(
    "source, guarded",
    [
        ("import normlab\nnormlab.claims.run()\n", False),
        ("def main():\n    pass\n\nif __name__ == '__main__':\n    main()\n", True),
        ("if '__main__' == __name__:\n    pass\n", True),
        ("if __name__ == 'other':\n    pass\n", False),
        ("this is not python(\n", False),
    ],
)
def test_unguarded_main_reads_the_main_file(source, guarded, tmp_path, monkeypatch):
    script = tmp_path / "script.py"
    script.write_text(source)
    main = type(sys)("__main__")
    main.__file__, main.__spec__ = str(script), None
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert _workers.unguarded_main() == (None if guarded else str(script))


def test_a_package_main_or_no_main_file_is_safe(monkeypatch):
    main = type(sys)("__main__")
    main.__spec__ = type("Spec", (), {"name": "normlab.__main__", "origin": __file__})()
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert _workers.unguarded_main() is None
    monkeypatch.setitem(sys.modules, "__main__", type(sys)("__main__"))  # -c, a REPL
    assert _workers.unguarded_main() is None


@pytest.mark.slow
def test_readme_main_job_example_runs_as_a_script(tmp_path):
    script = tmp_path / "main_job.py"
    script.write_text(_main_job_example())
    env = {**os.environ, "NORMLAB_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "freeze_support" not in done.stderr
    label = done.stdout.split()[0]
    assert label not in ("error", "") and "nan" not in done.stdout.split()[1], done.stdout
    if (os.cpu_count() or 1) > 1:  # jobs=None would have spawned workers: a note says why not
        assert "if __name__ ==" in done.stderr
