"""The benchmark's pure parts: byte formulas, round-time bounds, statistics, plan, timer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsheaf.graphs import Graph, load_graph
from fedsheaf.ops.bench.formulas import (
    alternate,
    balanced_makespan,
    fedavg_bytes_per_step,
    ideal_round_seconds,
    phase_table,
    pilot_bytes_by_agent,
    pilot_bytes_per_step,
    ratio,
    round_rows,
    static_makespan,
    strict_bytes_by_agent,
    strict_bytes_per_step,
    summary,
)
from fedsheaf.ops.bench.plan import CASE_NAMES, DEFAULT_CASES, parse_counts, plan
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.timers import NULL_TIMER, PhaseTimer

# ---- bytes ------------------------------------------------------------------------------


def test_pilot_bytes_on_a_hand_computed_path() -> None:
    # 0 -- 1 -- 2 with d = 4, 8, 4; K = 3: agent 1 is the head of both edges.
    g = Graph("path", (4, 8, 4), ((0, 1), (1, 2)))
    assert pilot_bytes_by_agent(g, 3) == [1 * 4 * 3 * 4, 2 * 8 * 3 * 4, 1 * 4 * 3 * 4]
    assert pilot_bytes_per_step(g, 3) == 48 + 192 + 48
    # strict: the tails send V_ji A_i (d_head = 8 rows) to the head; the head sends
    # O_ji A_i (its own d = 8 rows) to each tail.
    assert strict_bytes_by_agent(g, 3) == [8 * 3 * 4, 2 * 8 * 3 * 4, 8 * 3 * 4]
    assert strict_bytes_per_step(g, 3) == 384


def test_quickstart_graph_bytes() -> None:
    # graphs/quick4.yaml: complete graph on d = 16, 24, 32, 24, K = 32 (the quickstart).
    g = load_graph("graphs/quick4.yaml")
    assert pilot_bytes_per_step(g, 32) == 3 * (16 + 24 + 32 + 24) * 32 * 4 == 36864
    # every edge carries max(d_i, d_j) both ways
    edges_max = [24, 32, 24, 32, 24, 32]
    assert strict_bytes_per_step(g, 32) == 2 * sum(edges_max) * 32 * 4 == 43008


def test_equal_dims_strict_equals_standard() -> None:
    g = Graph("ring", (5, 5, 5), ((0, 1), (0, 2), (1, 2)))
    assert strict_bytes_by_agent(g, 7) == pilot_bytes_by_agent(g, 7)


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    n = draw(st.integers(2, 7))
    dims = tuple(draw(st.lists(st.integers(1, 300), min_size=n, max_size=n)))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs)))
    return Graph("g", dims, tuple(edges))


@settings(max_examples=60, deadline=None)
@given(graphs(), st.integers(1, 128))
def test_byte_formulas_are_sums_over_edges(g: Graph, k: int) -> None:
    d = g.dims
    assert pilot_bytes_per_step(g, k) == sum((d[i] + d[j]) * k * 4 for i, j in g.edges)
    assert strict_bytes_per_step(g, k) == sum(2 * max(d[i], d[j]) * k * 4 for i, j in g.edges)
    assert strict_bytes_per_step(g, k) >= pilot_bytes_per_step(g, k)


def test_fedavg_bytes_count_upload_and_download() -> None:
    assert fedavg_bytes_per_step([10, 20]) == 2 * 30 * 4
    assert fedavg_bytes_per_step([]) == 0


# ---- round times --------------------------------------------------------------------------


def test_ideal_and_placement_bounds() -> None:
    times = {0: 5.0, 4: 4.0, 1: 3.0, 2: 3.0, 6: 3.0}
    assert ideal_round_seconds(times.values(), 2, 0.5) == pytest.approx(18 / 2 + 0.5)
    # static: rank 1 + c mod 2 -> even clients {0, 4, 2, 6} = 15, odd {1} = 3
    assert static_makespan(times, 2) == pytest.approx(15.0)
    # LPT: 5 | 4, +3 -> 7 on the 4-side, +3 -> 8 on the 5-side, +3 -> 10
    assert balanced_makespan(times.values(), 2) == pytest.approx(10.0)
    with pytest.raises(ValueError):
        ideal_round_seconds([1.0], 0, 0.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=20), st.integers(1, 6))
def test_bounds_are_ordered(ts: list[float], w: int) -> None:
    times = dict(enumerate(ts))
    ideal = ideal_round_seconds(ts, w, 0.0)
    assert balanced_makespan(ts, w) >= ideal - 1e-9
    assert static_makespan(times, w) >= ideal - 1e-9
    assert balanced_makespan(ts, w) <= ideal + max(ts) + 1e-9  # LPT is within one job


def test_round_rows() -> None:
    history = [
        {"round": 1, "final": False, "selected": [0, 1], "train_seconds": 3.0},
        {"round": 2, "final": False, "selected": [1, 3], "train_seconds": 5.0},
        {"round": 3, "final": True},
    ]
    times = {(0, 0): 2.0, (0, 1): 2.0, (1, 1): 4.0, (1, 3): 4.0}
    rows = round_rows(history, times, [0.5, 0.5], 2)
    assert [r["ideal"] for r in rows] == [2.5, 4.5]
    # round 2: clients 1 and 3 both live on rank 2 -> static bound 8 + 0.5
    assert [r["static_placement"] for r in rows] == [2.5, 8.5]
    assert rows[1]["ratio"] == pytest.approx(5.0 / 4.5)


# ---- statistics ---------------------------------------------------------------------------


def test_summary_ratio_alternate_phase_table() -> None:
    assert summary([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert summary([])["median"] is None
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None and ratio(1.0, 0.0) is None
    assert alternate(["a", "b"], 3) == [["a", "b"], ["b", "a"], ["a", "b"]]
    table = phase_table([{"x": 1.0, "y": 2.0}, {"x": 3.0}])
    assert table == {"x": {"mean": 2.0, "max": 3.0}, "y": {"mean": 1.0, "max": 2.0}}


# ---- plan -----------------------------------------------------------------------------------


def test_plan_covers_every_case_and_filters() -> None:
    launches = plan("small", CASE_NAMES)
    covered = {c for la in launches for c in la.cases}
    assert covered == set(CASE_NAMES)
    only = plan("small", ["bytes"])
    assert only and all(la.cases == ["bytes"] for la in only)
    scaling = plan("full", ["scaling"], scaling_ranks=[1, 2, 4, 8, 16])
    assert [la.ranks for la in scaling] == [16]
    fedrep = plan("small", ["clients"], workers=[4, 2])
    assert [la.ranks for la in fedrep] == [5, 3]
    assert plan("small", ["clients"], image_data=False) == []
    assert all(
        "digits" in " ".join(la.spec["overrides"])
        for la in plan("small", ["overhead"], image_data=False)
        if la.label == "pair"
    )


def test_plan_rejects_bad_input() -> None:
    with pytest.raises(ConfigError, match="unknown bench case"):
        plan("small", ["overhed"])
    with pytest.raises(ConfigError, match="size"):
        plan("huge", ["bytes"])
    assert parse_counts("4,1,2,2", "--ranks") == [1, 2, 4]
    for bad in ("", "0,1", "a,b"):
        with pytest.raises(ConfigError):
            parse_counts(bad, "--ranks")


# ---- timer -----------------------------------------------------------------------------------


def test_phase_timer_accumulates_with_a_fake_clock() -> None:
    ticks = iter([0.0, 1.0, 10.0, 12.5, 20.0, 21.0, 21.5, 30.0])
    syncs = []
    timer = PhaseTimer(sync=lambda: syncs.append(1), clock=lambda: next(ticks))
    with timer("a"):
        pass
    with timer("b"):
        pass
    with timer("a"):
        with timer("c"):  # nested: each name keeps its own inclusive time
            pass
    assert timer.totals() == {"a": 1.0 + 10.0, "b": 2.5, "c": 0.5}
    assert timer.counts == {"a": 2, "b": 1, "c": 1}
    assert len(syncs) == 8
    timer.reset()
    assert timer.totals() == {}


def test_phase_timer_records_time_of_a_raising_section() -> None:
    ticks = iter([1.0, 3.5])
    timer = PhaseTimer(clock=lambda: next(ticks))
    with pytest.raises(RuntimeError), timer("x"):
        raise RuntimeError("boom")
    assert timer.counts == {"x": 1} and timer.seconds["x"] == 2.5


def test_null_timer_is_a_shared_no_op() -> None:
    assert NULL_TIMER("a") is NULL_TIMER("b") and not NULL_TIMER.enabled
    with pytest.raises(RuntimeError, match="not swallowed"), NULL_TIMER("a"):
        raise RuntimeError("not swallowed")


def test_measure_alternating_warms_up_then_alternates():
    from fedsheaf.ops.bench.formulas import measure_alternating

    calls: list[str] = []

    def measure(name: str) -> float:
        calls.append(name)
        return float(len(calls))

    samples = measure_alternating(["a", "b"], 3, measure)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]
    assert samples == {"a": [3.0, 6.0, 7.0], "b": [4.0, 5.0, 8.0]}


def test_benchmark_worker_modules_import():
    """Every case module the MPI worker loads imports cleanly (no launch needed)."""
    import importlib

    for name in ("worker", "decentralized", "pilot_cost", "clients", "driver", "placement"):
        importlib.import_module(f"fedsheaf.ops.bench.{name}")


# ---- placement (issue 29: N agents on R ranks) ------------------------------------------


def test_the_plan_places_15_and_100_agents_on_several_rank_counts() -> None:
    from fedsheaf.ops.bench.placement import placement_config
    from fedsheaf.ops.bench.worker import CASES

    assert "placement" in CASE_NAMES and "placement" in CASES
    assert "placement" not in DEFAULT_CASES  # (fedsheaf bench placement: thirteen launches)
    launches = plan("small", ["placement"], data_root="data")
    assert [(la.label, la.ranks) for la in launches] == [
        ("placement15-r1", 1),
        ("placement15-r3", 3),
        ("placement15-r5", 5),
        ("placement15-r15", 15),
        ("placement15-r1-recompute", 1),
        ("placement15-r3-recompute", 3),
        ("placement15-r5-recompute", 5),
        ("placement15-r1-release", 1),
        ("placement15-r3-release", 3),
        ("placement15-r5-release", 5),
        ("placement100-r1", 1),
        ("placement100-r2", 2),
        ("placement100-r4", 4),
    ]
    groups = {la.spec["group"] for la in launches}
    assert groups == {"table2-15", "table2-15-recompute", "table2-15-release", "er100"}
    lean = [la for la in launches if la.label.endswith(("-recompute", "-release"))]
    assert len(lean) == 6 and all(
        "sheaf.recompute_pilots=true" in la.spec["overrides"]
        and ("train.release_memory=true" in la.spec["overrides"]) == la.label.endswith("release")
        and la.spec["reference"] == "table2-15"
        for la in lean
    )
    assert all(la.cases == ["placement"] and "none" in la.mpi_flags for la in launches)
    assert [la.ranks for la in plan("full", ["placement"])][10:] == [1, 2, 4, 8, 16]
    # the launches' configs: 15 Table-2 agents; 100 copies of one small agent on er100
    table2 = placement_config(dict(launches[0].spec, label="x"))
    assert len(table2.agents) == 15 and table2.train.steps_per_epoch == 4
    small = placement_config(dict(launches[-1].spec, label="x"))
    assert len(small.agents) == 100 and load_graph(small.graph).n == 100
    assert {a.dim for a in small.agents} == {16} == set(load_graph(small.graph).dims)
    # a warm-up epoch, the timed ones, a last one that evaluates
    epochs = launches[-1].spec["repeats"] + 2
    assert (small.train.epochs, small.train.eval_every) == (epochs, epochs)


def test_with_tcmalloc_the_15_agents_run_again_with_it_preloaded() -> None:
    """Where tcmalloc is installed, ``fedsheaf bench placement`` adds the 15 agents with
    it as every rank's malloc: at every R (the allocator changes R = N too), and below
    R = N with recompute_pilots against that R = N; the worker refuses to time a launch
    whose preload did not take."""
    from fedsheaf.ops.bench.placement import check_malloc

    plain = plan("small", ["placement"], data_root="data")
    launches = plan("small", ["placement"], data_root="data", tcmalloc="libtcmalloc_x.so.4")
    extra = launches[len(plain) - 3 : -3]  # (between the Table-2 groups and er100)
    assert [la.label for la in launches[: len(plain) - 3]] == [la.label for la in plain[:-3]]
    assert [(la.label, la.ranks) for la in extra] == [
        ("placement15-r1-tcmalloc", 1),
        ("placement15-r3-tcmalloc", 3),
        ("placement15-r5-tcmalloc", 5),
        ("placement15-r15-tcmalloc", 15),
        ("placement15-r1-tcmalloc-recompute", 1),
        ("placement15-r3-tcmalloc-recompute", 3),
        ("placement15-r5-tcmalloc-recompute", 5),
    ]
    assert all(
        la.env == {"LD_PRELOAD": "libtcmalloc_x.so.4"} and la.spec["malloc"] == "tcmalloc"
        for la in extra
    )
    assert {la.spec["group"] for la in extra} == {
        "table2-15-tcmalloc",
        "table2-15-tcmalloc-recompute",
    }
    for la in extra:
        recompute = la.label.endswith("recompute")
        assert ("sheaf.recompute_pilots=true" in la.spec["overrides"]) == recompute
        assert la.spec.get("reference") == ("table2-15-tcmalloc" if recompute else None)
    assert all("LD_PRELOAD" not in la.env for la in plain)
    with pytest.raises(ConfigError, match="placement15-r3-tcmalloc needs tcmalloc as malloc"):
        check_malloc(extra[1].worker_spec("cpu"))
    check_malloc(plain[1].worker_spec("cpu"))  # (no malloc asked for)


def _placement_result(ranks: int, median: float, agents: int = 15) -> dict:
    return {
        "label": f"placement{agents}-r{ranks}",
        "group": f"g{agents}",
        "config": "configs/mnist15.yaml",
        "overrides": [],
        "algorithm": "sheaf_frl",
        "agents": agents,
        "edges": 42,
        "ranks": ranks,
        "placement": "contiguous",
        "agents_per_rank": [agents // ranks] * ranks,
        "cut_edges": 0 if ranks == 1 else 30,
        "steps_per_epoch": 4,
        "threads_per_rank": 1,
        "epoch_seconds": [median],
        "all_epoch_seconds": [median] * 3,
        "stats": summary([median]),
        "mpi_bytes_total": 0 if ranks == 1 else 1000,
        "algorithm_bytes_total": 2000,
    }


def test_placement_results_are_judged_against_the_best_of_one_rank_and_one_per_agent() -> None:
    from fedsheaf.ops.bench.document import evaluate, placement_ratios, render_markdown

    results = [_placement_result(r, t) for r, t in ((1, 4.0), (3, 4.4), (5, 5.0), (15, 6.0))]
    doc = {"meta": {}, "launches": [_launch(r) for r in results], "results": {"placement": results}}
    rows = [row for row in evaluate(doc) if row["id"] == "29"]
    assert [(row["where"], row["value"], row["status"]) for row in rows] == [
        ("g15 (15 agents, R = 3)", pytest.approx(1.1), "met"),
        ("g15 (15 agents, R = 5)", pytest.approx(1.25), "missed"),
    ]
    assert "host memory 0.2× that of R = 15 (R/15 = 0.2)" in rows[0]["note"]
    gb = 10**9
    ratios = placement_ratios(
        [dict(r, memory={"peak_rss_bytes_total": r["ranks"] * gb}) for r in results]
    )
    assert ratios[1]["memory_vs_ref"] == pytest.approx(1 / 15)
    md = render_markdown(doc)
    assert "## N agents on R ranks (placement)" in md
    assert "| 3 | 5 | 1 | 30 of 42 | 4.4 |" in md
    # a group of the same agents with sheaf.recompute_pilots borrows its reference's R = N
    again = [
        dict(_placement_result(r, t), group="g15-recompute", reference="g15")
        for r, t in ((1, 5.0), (3, 6.0))
    ]
    doc["results"] = {"placement": results + again}
    doc["launches"] = [_launch(r) for r in results + again]
    rows = [row for row in evaluate(doc) if row["where"].startswith("g15-recompute")]
    assert [(row["where"], row["value"]) for row in rows] == [
        ("g15-recompute (15 agents, R = 3)", pytest.approx(1.2))  # best: R = 1 (5.0 s)
    ]
    assert "| 15 (of g15) |" in render_markdown(doc)
    # without R = N (100 agents on 1, 2, 4 ranks): against R = 1, memory against R = 4
    hundred = [_placement_result(r, 10.0, agents=100) for r in (1, 2, 4)]
    doc["results"] = {"placement": hundred}
    doc["launches"] = [_launch(r) for r in hundred]
    (two, four) = [row for row in evaluate(doc) if row["id"] == "29"]
    assert two["value"] == 1.0 and "best of R = 1;" in two["note"] and "R = 4" in four["note"]


def _launch(result: dict) -> dict:
    """The launch record of a placement result: 1 GB peak on each of its ranks."""
    gb, ranks = 10**9, result["ranks"]
    return {
        "label": result["label"],
        "ranks": ranks,
        "returncode": 0,
        "memory": {
            "peak_rss_bytes": [gb] * ranks,
            "peak_rss_bytes_max": gb,
            "peak_rss_bytes_total": gb * ranks,
        },
    }
