"""Benchmarks of fedsheaf's performance targets (``fedsheaf bench``; results/bench/README.md).

* :mod:`.formulas` — byte counts, ideal round times, medians: pure functions.
* :mod:`.document` — targets, JSON and Markdown output.
* :mod:`.plan` — which launches each case needs at each size (``small``, ``full``).
* :mod:`.decentralized`, :mod:`.pilot_cost`, :mod:`.clients` — what every rank runs
  (``python -m fedsheaf.ops.bench.worker``), with :mod:`.rank_tools` (clocks, sleeping barrier);
  :mod:`.driver` — what ``fedsheaf bench`` (:mod:`fedsheaf.cli.bench`) runs.

The per-phase timer the training loop carries (off by default) is
:mod:`fedsheaf.util.timers`: the core does not import this package.
"""
