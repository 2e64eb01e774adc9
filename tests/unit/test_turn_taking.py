"""Turn-taking threads of agents sharing a rank (fedsheaf.runtime.colocated.TurnTaking)."""

from __future__ import annotations

import threading

from fedsheaf.runtime.colocated import TurnTaking


def test_the_handover_runs_each_time_the_turn_passes_to_another_thread() -> None:
    """Three threads meet twice and end: the turn passes 0 → 1 → 2 at each meeting and
    back to 0 after it, then 0 → 1 → 2 as they end; ``handover`` runs at each pass (what
    train.release_memory hooks), and every thread gets its part of each meeting."""
    log: list[str] = []
    turns = TurnTaking(3, handover=lambda: log.append(f"handover from {turns._turn}"))
    got: dict[int, list[int]] = {0: [], 1: [], 2: []}

    def body(k: int) -> None:
        turns.start(k)
        for meeting in range(2):
            log.append(f"{k} meets")
            got[k].append(turns.meet(k, 10 * meeting + k, lambda vs: [v + 100 for v in vs]))
        turns.done(k)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert got == {k: [100 + k, 110 + k] for k in range(3)}
    meeting = ["0 meets", "handover from 0", "1 meets", "handover from 1", "2 meets"]
    back = ["handover from 2"]  # (the last does the meeting's work, then 0 resumes)
    ends = ["handover from 0", "handover from 1"]  # (2 is the last: nobody takes over)
    assert log == [*meeting, *back, *meeting, *back, *ends], log


def test_one_thread_never_hands_over() -> None:
    calls: list[int] = []
    turns = TurnTaking(1, handover=lambda: calls.append(1))
    turns.start(0)
    assert turns.meet(0, 5, lambda vs: [v * 2 for v in vs]) == 10
    assert calls == []
