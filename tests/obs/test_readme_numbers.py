"""README.md's demo paragraph and docs/img's pictures come from one recorded demo run
(docs/img/demo-run.json, written by `python -m dashboards.render_png`): the paragraph is the
record's rendering, every picture is the one the record names, and a changed picture or number
is reported stale by `python -m dashboards.readme --check` (which `make test` runs)."""

from __future__ import annotations

import json

from dashboards import readme


def _record() -> dict:
    return json.loads(readme.RECORD.read_text(encoding="utf-8"))


def test_committed_readme_and_pictures_are_the_recorded_run():
    assert readme.main(["--check"]) == 0
    text = readme.README.read_text(encoding="utf-8")
    assert readme.paragraph(_record()) in text


def test_numbers_come_from_the_record():
    rec = _record()
    over = max(rec["overcommit_bytes"].values()) / 2**30
    reserve = min(rec["reserve_bytes"].values()) / 2**30
    text = readme.paragraph(rec)
    assert f"{over:.2f} GiB over-commit" in text and f"{over / reserve:.0%} of the" in text
    for name in rec["first_firing_s"]:
        assert f"`{name}`" in text
    changed = {**rec, "reserve_bytes": {k: v * 2 for k, v in rec["reserve_bytes"].items()}}
    assert readme.paragraph(changed) != text


def test_a_picture_not_from_the_run_is_stale():
    rec = _record()
    assert readme.stale_pictures(rec) == []
    other = {**rec, "pictures": {**rec["pictures"], "demo-terminal.png": "0" * 64}}
    (stale,) = readme.stale_pictures(other)
    assert "demo-terminal.png" in stale
