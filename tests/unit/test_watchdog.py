"""Whom the step watchdog names (fedsheaf.runtime.watchdog.judge); on real ranks, with a
rank stopped by SIGSTOP: tests/mpi/test_failures.py."""

from __future__ import annotations

import pytest

pytest.importorskip("mpi4py")

from fedsheaf.runtime.watchdog import judge

T = 5.0


def test_ranks_that_do_not_answer_are_named_first():
    answers = {1: (9.0, True, True), 3: (1.0, False, True)}  # 2 and 4 silent
    assert judge(0, 5, T, answers, (9.0, True)) == ("silent", [2, 4])


def test_else_the_ranks_that_work_on_without_finishing_a_step():
    answers = {1: (9.0, True, True), 2: (7.0, False, True), 3: (1.0, False, True)}
    assert judge(0, 4, T, answers, (9.0, True)) == ("working", [2])
    assert judge(0, 2, T, {1: (9.0, True, True)}, (8.0, False)) == ("working", [0])


def test_else_every_rank_waiting_for_too_long_is_a_deadlock():
    answers = {1: (9.0, True, True), 2: (6.0, True, True)}
    assert judge(0, 3, T, answers, (9.0, True)) == ("deadlock", [0, 1, 2])


def test_nobody_is_at_fault_while_a_rank_is_still_starting_or_progressing():
    assert judge(0, 3, T, {1: (9.0, True, True), 2: (50.0, False, False)}, (9.0, True)) == (
        "",
        [],
    )
    assert judge(0, 3, T, {1: (9.0, True, True), 2: (0.5, True, True)}, (9.0, True)) == ("", [])
