"""normlab compare tunes each arm once, on its first seed, and trains the other seeds at
that choice; a new tuning recomputes the seeds that reused the old one."""

from __future__ import annotations

import json

from normlab.compare import compare


def _compare(out):
    return compare(
        "tests.compare._toys:classifier",
        "tests.compare._toys:two_moons",
        ["layernorm", "rmsnorm"],
        task="classify",
        steps=6,
        seeds=3,
        lrs=[3e-3, 1e-2, 3e-2],
        batch=32,
        out=out,
    )


def test_the_first_seed_tunes_and_the_others_train_once_at_its_choice(tmp_path):
    c = _compare(tmp_path)
    for name, arm in c.arms.items():
        tasks = sorted((t for t in c.tasks if t["arm"] == name), key=lambda t: t["seed"])
        first, *others = tasks
        assert first["tuning"]["trials"] >= 3 and not first["fixed"]
        for t in others:
            assert t["fixed"] and t["tuning"]["trials"] == 1 and t["tuning"]["tie"] == "fixed"
            assert t["lr"] == first["lr"] and not t["tuning"]["on_edge"]
        assert len(set(arm.lrs)) == 1


def test_a_new_tuning_recomputes_the_seeds_that_reused_the_old_one(tmp_path):
    _compare(tmp_path)
    assert _compare(tmp_path).cached == 6  # every task reused
    path = next(
        p
        for p in (tmp_path / "tasks").glob("layernorm-*seed0.json")
        if json.loads(p.read_text())["arm"] == "layernorm"
    )
    record = json.loads(path.read_text())
    other = 3e-3 if record["lr"] != 3e-3 else 3e-2
    record["tuning"]["chosen"] = {"lr": other}  # as if the first seed had tuned again
    path.write_text(json.dumps(record))
    again = _compare(tmp_path)
    assert again.cached == 4  # layernorm's seeds 1 and 2 train at the new choice
    assert [t["lr"] for t in again.tasks if t["arm"] == "layernorm" and t["seed"] > 0] == [
        other,
        other,
    ]
