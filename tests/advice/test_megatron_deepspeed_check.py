"""experiments/validation/megatron_deepspeed.py: public Megatron-DeepSpeed runs (BLOOM-176B on Jean Zay, MT-NLG
530B on Selene) read as a check no parameter comes from. Every configuration ran, so every plan passes the
pinned-plan checks and fits; the known miss (docs/accuracy.md: DeepSpeed's pipeline engine is not modelled)
stays what the docs say: BLOOM 15-25% slower than predicted; MT-NLG, whose micro-batch is not published, from
~25% slower at micro-batch 1 to within 10% at 4."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_megatron_deepspeed_runs_fit_and_miss_as_documented():
    sys.path.insert(0, str(REPO / "experiments" / "validation"))
    import megatron_deepspeed

    (bloom,) = megatron_deepspeed.errors(lambda *_: None)
    assert megatron_deepspeed.estimate(megatron_deepspeed.TABLE).fits and -25.0 <= bloom <= -15.0, bloom
    one, four = megatron_deepspeed.mtnlg_errors(1), megatron_deepspeed.mtnlg_errors(4)
    assert all(-30.0 <= e <= -15.0 for e in one) and all(abs(e) <= 10.0 for e in four), (one, four)
