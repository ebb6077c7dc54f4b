"""``mixle train --mixture`` keeps every source's epoch plans in ``CHECKPOINT_DIR/plans``."""

from __future__ import annotations

import json
from pathlib import Path

from mixle.train import train
from tests.train._helpers import tiny_config, write_text_corpus


def _plan_identities(plans: Path) -> list[dict[str, object]]:
    """The identities recorded in the headers of the plan files."""
    identities = []
    for path in sorted(plans.iterdir()):
        data = path.read_bytes()
        length = int.from_bytes(data[8:16], "little")
        identities.append(json.loads(data[48 : 48 + length])["identity"])
    return identities


def test_a_mixture_run_saves_and_a_resumed_run_reuses_the_source_plans(tmp_path: Path) -> None:
    write_text_corpus(tmp_path / "big", documents=40, seed=1)
    write_text_corpus(tmp_path / "small", documents=6, seed=2)
    mix = tmp_path / "mix.toml"
    mix.write_text(
        f'[[source]]\nname = "big"\npath = "{tmp_path / "big"}"\nweight = 0.7\n\n'
        f'[[source]]\nname = "small"\npath = "{tmp_path / "small"}"\nweight = 0.3\n'
    )
    run = tmp_path / "run"
    config = tiny_config(  # the permutation order: the one whose plans are kept
        mix,
        mixture=str(mix),
        steps=4,
        checkpoint_dir=str(run),
        checkpoint_every=2,
        order="permutation",
    )
    train(config, log=lambda _: None)
    plans = run / "plans"
    identities = _plan_identities(plans)
    names = {i["mixture_source"] for i in identities}
    assert names == {"big", "small"}
    assert {i.get("plan") for i in identities} >= {"tokens", None}  # counts and layouts
    stamps = {p.name: p.stat().st_mtime_ns for p in plans.iterdir()}
    train(config.replace(steps=6, resume=True), log=lambda _: None)
    # The resumed run loaded the saved plans (rewrote none); later epochs may add files.
    assert {p.name: p.stat().st_mtime_ns for p in plans.iterdir() if p.name in stamps} == stamps
