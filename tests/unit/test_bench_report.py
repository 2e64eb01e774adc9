"""Benchmark targets, JSON and Markdown output on a hand-made results document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedsheaf.ops.bench.document import (
    MET,
    MISSED,
    NOT_HERE,
    evaluate,
    load_average,
    render_markdown,
    write,
)


def _stats(m: float) -> dict[str, Any]:
    return {"median": m, "min": m, "max": m, "n": 1}


def document(device: str = "cpu") -> dict[str, Any]:
    overhead = {
        "label": "pair",
        "config": "configs/pair.yaml",
        "overrides": [],
        "agents": 2,
        "steps_per_epoch": 8,
        "batch_size": 64,
        "pilot_batch": 64,
        "stats": {"noncoop": _stats(1.0), "sheaf_frl": _stats(2.0)},
        "ratio": {"noncoop": 1.0, "sheaf_frl": 2.0},
        "paired_ratio": {"noncoop": 1.0, "sheaf_frl": 2.05},
        "phases": {
            "sheaf_frl": {"pilot_forward": {"mean": 0.01, "max": 0.02}, "step": {"mean": 0.1}}
        },
    }
    pilot = {
        "label": "pair",
        "config": "configs/pair.yaml",
        "batch_size": 64,
        "pilot_batch": 64,
        "threads": 1,
        "floor_ratio": 1.9,
        "batched_ratio": 2.1,
        "agents": [
            {
                "agent": 0,
                "dim": 128,
                "seconds": {"plain": 0.01, "separate": 0.019, "batched": 0.021},
                "separate_over_plain": 1.9,
                "batched_over_plain": 2.1,
            }
        ],
    }
    variant = {
        "measured_bytes_per_step": 100.0,
        "formula_bytes_per_step": 100,
        "ratio_to_formula": 1.0,
        "worst_agent_deviation": 0.0,
        "fraction_of_fedavg": 0.05,
    }
    traffic = {
        "label": "quickstart",
        "agents": 4,
        "edges": 6,
        "dims": [16, 24, 32, 24],
        "pilot_batch": 32,
        "steps": 4,
        "fedavg_bytes_per_step": 2000,
        "variants": {"standard": variant, "strict": dict(variant, ratio_to_formula=1.02)},
    }
    speedup = {
        "label": "table2",
        "config": "configs/mnist15.yaml",
        "overrides": [],
        "agents": 15,
        "steps_per_epoch": 4,
        "threads": {"sequential": 2, "parallel_per_rank": 1},
        "stats": {"sequential": _stats(9.0), "parallel": _stats(1.0)},
        "speedup": {"parallel": 9.0},
    }
    scaling = {
        "label": "scaling",
        "agent": {"encoder": [16, 32, 64]},
        "latent_dim": 64,
        "steps_per_epoch": 8,
        "ranks": [1, 2],
        "stats": {"1": _stats(1.0), "2": _stats(1.2)},
        "time_ratio": {"1": 1.0, "2": 1.2},
    }
    clients = {
        "label": "fedrep-4w",
        "workers": 4,
        "sampled_per_round": 10,
        "median": {
            "measured": 1.3,
            "ideal": 1.0,
            "static_placement": 1.3,
            "balanced_placement": 1.05,
        },
        "ratio": {"median": 1.3, "min": 1.2, "max": 1.4, "n": 4},
        "ratio_static_bound": 1.3,
        "ratio_balanced_bound": 1.05,
    }
    return {
        "meta": {"tag": "t", "size": "small", "device": device, "notes": ["a note"]},
        "launches": [{"label": "x", "returncode": 1, "log": "x.log"}],
        "results": {
            "overhead": [overhead],
            "pilot_cost": [pilot],
            "bytes": [traffic],
            "speedup": [speedup],
            "scaling": [scaling],
            "clients": [clients],
        },
    }


def test_targets_are_judged() -> None:
    rows = {(r["id"], r["where"]): r for r in evaluate(document())}
    assert rows[("1", "pair")]["status"] == MISSED
    assert "floor 1.9" in rows[("1", "pair")]["note"]
    assert rows[("2", "quickstart")]["status"] == MET
    assert rows[("2-strict", "quickstart")]["status"] == MISSED  # 1.02 is outside ±0.01
    assert rows[("2-fedavg", "quickstart")]["status"] == MISSED  # 5% > 1%
    assert rows[("3", "table2")]["status"] == NOT_HERE  # CPU: the target names a GPU
    assert rows[("3-weak", "scaling (1→2)")]["status"] == NOT_HERE
    assert rows[("4", "fedrep-4w (4 workers)")]["status"] == MISSED
    on_gpu = {r["id"]: r for r in evaluate(document("cuda:0"))}
    assert on_gpu["3"]["status"] == MET


def test_markdown_and_json_are_written(tmp_path: Path) -> None:
    doc = document()
    md = render_markdown(doc)
    for heading in (
        "## Targets",
        "## Target 1",
        "## Pilot-pass cost",
        "## Target 2",
        "one rank per agent",
        "weak scaling",
        "## Target 4",
        "## Launches without a result",
    ):
        assert heading in md
    assert "* a note" in md
    json_path, md_path = write(tmp_path, "t", doc)
    loaded = json.loads(json_path.read_text())
    assert loaded["targets"] == evaluate(doc)
    assert md_path.read_text() == md + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.md"]  # no temp files


def test_gpu_speedup_says_whether_the_ranks_shared_the_gpu_through_mps() -> None:
    doc = document("cuda:0")
    speedup = doc["results"]["speedup"][0]
    assert "MPS" not in render_markdown(doc) and "time slices" not in render_markdown(doc)
    speedup.update(device="cuda", mps=None)
    assert "No MPS daemon: the ranks' CUDA contexts took the GPU in time slices" in (
        render_markdown(doc)
    )
    speedup["mps"] = "/tmp/pipe"
    assert "shared the GPU through MPS (pipe /tmp/pipe)" in render_markdown(doc)
    speedup.update(device="cpu", mps=None)
    assert "MPS" not in render_markdown(doc)


def test_mps_pipe_is_found_only_where_a_control_pipe_exists(tmp_path, monkeypatch) -> None:
    from fedsheaf.ops.bench.rank_tools import mps_pipe

    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert mps_pipe() is None
    (tmp_path / "control").touch()
    assert mps_pipe() == str(tmp_path)


def test_each_pilot_batch_of_the_overhead_case_gets_a_row() -> None:
    doc = document()
    overhead = doc["results"]["overhead"][0]
    overhead["ratio"].update({"sheaf_frl_K=16": 1.3, "sheaf_frl_K=4": 1.08})
    overhead["paired_ratio"].update({"sheaf_frl_K=16": 1.31, "sheaf_frl_K=4": 1.07})
    rows = {r["id"]: r for r in evaluate(doc) if r["where"] == "pair"}
    assert rows["1-K=16"]["status"] == MISSED and rows["1-K=16"]["value"] == 1.3
    assert rows["1-K=4"]["status"] == MET and "paired median 1.07" in rows["1-K=4"]["note"]
    assert "sheaf_frl_K=4 / noncoop epoch time ≤ 1.10" in render_markdown(doc)


def test_the_load_average_reads_as_three_short_numbers():
    assert load_average([5.9169921875, 6.24072265625, 7.271484375]) == (
        "5.92, 6.24, 7.27 (1, 5, 15 min)"
    )
    assert load_average(None) == "not known"  # no os.getloadavg on the machine


def test_each_launch_that_finished_has_a_memory_row() -> None:
    from fedsheaf.util.memory import per_rank

    doc = document("cuda:0")
    cpu = per_rank([{"rss": 900_000_000, "file": 500_000_000}, {"rss": 1_100_000_000, "file": 0}])
    gpu = per_rank([{"rss": 2_000_000_000, "file": 600_000_000, "cuda": 3_000_000_000}])
    doc["launches"] += [
        {"label": "pair", "ranks": 2, "returncode": 0, "memory": cpu},
        {"label": "table2", "ranks": 1, "returncode": 0, "memory": gpu},
        {"label": "old", "ranks": 4, "returncode": 0},  # from before memory was recorded
    ]
    md = render_markdown(doc).splitlines()
    head = md.index("## Memory (peak per rank, over all of a launch's cases)")
    rows = [ln for ln in md[head:] if ln.startswith("| ")][1:]
    assert rows == [
        "| pair | 2 | 1.10 GB | 500.00 MB | 2.00 GB | – |",
        "| table2 | 1 | 2.00 GB | 600.00 MB | 2.00 GB | 3.00 GB |",
    ]
    assert "## Memory" not in render_markdown(document())  # no launch recorded any
