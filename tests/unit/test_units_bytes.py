"""One byte formatter (fedsheaf.util.units.human_bytes) for progress lines, tables and watch."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from fedsheaf.launch import server as server_launch
from fedsheaf.ops import report_runs, watch
from fedsheaf.rundir import progress
from fedsheaf.rundir.progress import Recorder
from fedsheaf.util import units
from fedsheaf.util.units import human_bytes


@pytest.mark.parametrize(
    ("n", "compact", "text"),
    [
        (1000, True, "1.0 kB"),
        (99_999, True, "100.0 kB"),
        (100_000, True, "0.10 MB"),
        (2_500_000_000, True, "2500.00 MB"),
        (0, True, "0.0 kB"),
        (3300, False, "3.30 kB"),
        (1000, False, "1.00 kB"),
        (250_000, False, "250.00 kB"),
        (18_870_000, False, "18.87 MB"),
        (2.5e9, False, "2.50 GB"),
        (512, False, "512 B"),
        (None, False, "–"),
        ("12", True, "–"),
    ],
)
def test_human_bytes_forms(n: Any, compact: bool, text: str) -> None:
    assert human_bytes(n, compact=compact) == text


def test_every_caller_uses_the_one_helper() -> None:
    for module in (progress, report_runs, watch, server_launch):
        assert module.human_bytes is units.human_bytes, module.__name__
    assert not hasattr(server_launch, "_mb") and not hasattr(progress, "_mb")


class _World:
    is_root = True

    def __init__(self) -> None:
        self.lines: list[str] = []

    def gather(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        return [record]

    def log(self, msg: str) -> None:
        self.lines.append(msg)


def test_progress_line_keeps_the_compact_form() -> None:
    world = _World()
    rec = Recorder(world, None, epochs=2)
    rec.epoch({"epoch": 1, "loss": 0.5, "seconds": 1.25, "bytes_sent": 1000})
    rec.epoch({"epoch": 2, "loss": 0.25, "seconds": 1.0, "bytes_sent": 250_000})
    assert world.lines == [
        "epoch   1/2  loss 0.5000  1.2s  sent 1.0 kB",
        "epoch   2/2  loss 0.2500  1.0s  sent 0.25 MB",
    ]


def test_an_evaluated_epoch_says_what_its_evaluation_sent_apart() -> None:
    """noncoop sends nothing in training, but each evaluation moves its test latents and
    the pilot features its maps are fitted on (53 MB on the 15-agent graph)."""
    world = _World()
    rec = Recorder(world, None, epochs=4)
    agent = {"agent": 0, "dim": 8, "degree": 2, "private_acc": 0.5, "comm_acc": 0.3}
    agent.update(comm_acc_deg=0.3, private_acc_val=0.5, comm_acc_val=0.3, comm_acc_deg_val=0.3)
    agent.update(epoch=4, loss=1.5, seconds=19.6, bytes_sent=0, eval_bytes_sent=53_288_260)
    rec.epoch(agent)
    assert world.lines[0].startswith(
        "epoch   4/4  loss 1.5000  19.6s  sent 0.0 kB training + 53.29 MB evaluation  private "
    ), world.lines


def test_report_and_watch_still_import_without_torch() -> None:
    code = (
        "import sys, fedsheaf.ops.report_runs, fedsheaf.ops.watch; "
        "sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_counts_read_as_english():
    from fedsheaf.util.units import count

    assert [count(n, "rank") for n in (0, 1, 2)] == ["0 ranks", "1 rank", "2 ranks"]


@pytest.mark.parametrize(
    ("value", "digits", "text"),
    [(0.91234, 3, "0.912"), (12, 1, "12.0"), (float("nan"), 3, "–"), (None, 3, "–"), ("x", 2, "–")],
)
def test_decimals_say_a_dash_for_what_is_not_a_number(value: Any, digits: int, text: str) -> None:
    assert units.decimals(value, digits) == text
