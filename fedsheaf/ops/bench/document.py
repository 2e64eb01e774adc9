"""Benchmark results: the targets they are judged against, JSON and Markdown (pure I/O).

A results document is a dict::

    {"meta": {size, device, host, cores, started, seconds, notes, ...},
     "launches": [{label, ranks, cases, seconds, returncode, log, environment, memory}, ...],
     "results": {case: [one result per launch that ran the case], ...}}

:func:`evaluate` turns it into one row per target and place measured;
:func:`render_markdown` into the summary; :func:`write` stores both atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fedsheaf.ops.bench.formulas import ratio
from fedsheaf.ops.bench.plan import K_METHOD
from fedsheaf.util.atomic import atomic_write_json, atomic_write_text
from fedsheaf.util.units import human_bytes

MET, MISSED, NOT_HERE, FAILED = "met", "missed", "not measurable here", "no result"


def _status(ok: bool | None) -> str:
    return FAILED if ok is None else (MET if ok else MISSED)


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e4 else f"{x:,.0f}"
    return str(x)


def _row(
    target_id: str, target: str, where: str, value: float | None, status: str, note: str = ""
) -> dict[str, Any]:
    return {
        "id": target_id,
        "target": target,
        "where": where,
        "value": value,
        "status": status,
        "note": note,
    }


#: Overhead-case methods with a row of their own: (method, row id, pilot-cost floor key).
OVERHEAD_ROWS = (
    ("sheaf_frl", "1", "floor_ratio"),
    ("sheaf_frl_overlap", "1-overlap", "floor_ratio"),
    ("sheaf_frl_fused", "1-fused", "batched_ratio"),
    ("sheaf_frl_k/8", "1-K/8", None),
)


def _overhead_methods(ratios: dict[str, Any]) -> Iterable[tuple[str, str, str | None]]:
    """The rows of one overhead result: the fixed ones, then each ``--pilot-batches`` K."""
    yield from (row for row in OVERHEAD_ROWS if row[0] in ratios)
    for method in ratios:
        if method.startswith(K_METHOD):
            yield method, f"1-K={method.removeprefix(K_METHOD)}", None


def _overhead_rows(
    results: list[dict[str, Any]], floors: dict[str, dict[str, float]]
) -> Iterable[dict]:
    for r in results:
        for method, target_id, floor_key in _overhead_methods(r["ratio"]):
            value = r["ratio"][method]
            floor = floors.get(r["label"], {}).get(floor_key) if floor_key else None
            note = f"paired median {fmt(r['paired_ratio'].get(method))}"
            if floor is not None and value is not None:
                note += f"; pilot-pass floor {fmt(floor)} (measured = {fmt(value / floor)} × floor)"
            yield _row(
                target_id,
                f"{method} / noncoop epoch time ≤ 1.10",
                r["label"],
                value,
                _status(None if value is None else value <= 1.10),
                note,
            )


def _bytes_rows(results: list[dict[str, Any]]) -> Iterable[dict]:
    for r in results:
        for variant, v in r["variants"].items():
            exact = v["ratio_to_formula"]
            yield _row(
                "2" if variant == "standard" else "2-strict",
                f"{variant} pilot bytes / formula = 1.00 ± 0.01",
                r["label"],
                exact,
                _status(None if exact is None else abs(exact - 1.0) <= 0.01),
                f"{fmt(v['measured_bytes_per_step'])} B/step measured",
            )
        std = r["variants"].get("standard")
        if std is not None:
            frac = std["fraction_of_fedavg"]
            yield _row(
                "2-fedavg",
                "pilot bytes ≤ 1% of FedAvg's per step",
                r["label"],
                frac,
                _status(None if frac is None else frac <= 0.01),
                f"FedAvg {fmt(float(r['fedavg_bytes_per_step']))} B/step",
            )


def _speedup_rows(results: list[dict[str, Any]], device: str) -> Iterable[dict]:
    for r in results:
        value = r["speedup"].get("parallel")
        gpu = device.startswith("cuda")
        yield _row(
            "3",
            "15 agents: one rank each ≥ 8× faster than one process (one GPU)",
            r["label"],
            value,
            _status(None if value is None else value >= 8.0) if gpu else NOT_HERE,
            "" if gpu else "measured on CPU; the target is stated for one GPU",
        )


def _scaling_rows(results: list[dict[str, Any]]) -> Iterable[dict]:
    for r in results:
        n = max(r["ranks"])
        value = r["time_ratio"].get(str(n))
        full = n >= 16
        yield _row(
            "3-weak",
            "weak scaling 1→16 ranks: epoch time within 1.3×",
            f"{r['label']} (1→{n})",
            value,
            _status(None if value is None else value <= 1.3) if full else NOT_HERE,
            "" if full else f"only 1→{n} ranks measurable on this machine",
        )


def _clients_rows(results: list[dict[str, Any]]) -> Iterable[dict]:
    for r in results:
        value = r["ratio"]["median"]
        placement = r.get("placement")  # absent in results from before placement existed
        judged = r["workers"] == 4 and placement != "static"
        note = (
            f"static-placement bound {fmt(r['ratio_static_bound'])}, "
            f"balanced {fmt(r['ratio_balanced_bound'])}"
        )
        if placement is not None:
            note = (
                f"{placement} placement; busiest-rank bound of that placement "
                f"{fmt(r.get('ratio_placed_bound'))}; " + note
            )
        yield _row(
            "4",
            "100-client FedRep round ≤ 1.2× ideal (4 workers)",
            f"{r['label']} ({r['workers']} workers)",
            value,
            _status(None if value is None else value <= 1.2) if judged else "reference",
            note,
        )


def placement_groups(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The placement results by group (the same agents on several rank counts), each by
    rank count, with the launch's peak memory (``memory``: :func:`fedsheaf.util.memory.per_rank`'s
    record) added from its launch record."""
    memory = {la["label"]: la.get("memory") or {} for la in doc.get("launches", [])}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in doc.get("results", {}).get("placement", []):
        if r:
            groups.setdefault(r["group"], []).append(dict(r, memory=memory.get(r["label"], {})))
    # a group that only changes what several agents on a rank do (sheaf.recompute_pilots,
    # train.release_memory) takes its R = N launch from the group it names as its reference
    for rs in groups.values():
        ref = rs[0].get("reference")
        have = {r["ranks"] for r in rs}
        for r in groups.get(ref, []) if ref else []:
            if r["ranks"] == r["agents"] and r["ranks"] not in have:
                rs.append(dict(r, borrowed=ref))
    return {g: sorted(rs, key=lambda r: r["ranks"]) for g, rs in groups.items()}


def placement_ratios(results: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """By rank count R: the median epoch over the best of R = 1's and R = N's (those
    measured), and the host memory (peak RSS summed over ranks) over R = N's (else over
    the most ranks measured), beside the ideal R / N."""
    n = results[0]["agents"]
    median = {r["ranks"]: r["stats"]["median"] for r in results}
    ends = [median[k] for k in (1, n) if median.get(k) is not None]
    best = min(ends) if ends else None
    total = {r["ranks"]: r["memory"].get("peak_rss_bytes_total") for r in results}
    ref = n if total.get(n) else max((k for k, v in total.items() if v), default=n)
    return {
        r["ranks"]: {
            "time_vs_best_end": ratio(median[r["ranks"]], best),
            "memory_vs_ref": ratio(total[r["ranks"]], total.get(ref)),
            "memory_ref_ranks": ref,
            "memory_ideal": r["ranks"] / ref,
        }
        for r in results
    }


def _placement_rows(doc: dict[str, Any]) -> Iterable[dict]:
    for group, results in placement_groups(doc).items():
        n = results[0]["agents"]
        measured = [k for k in (1, n) if any(r["ranks"] == k for r in results)]
        ratios = placement_ratios(results)
        for r in results:
            if r["ranks"] in (1, n):
                continue
            got = ratios[r["ranks"]]
            ends = " and ".join(f"R = {k}" for k in measured) or "neither end"
            yield _row(
                "29",
                "N agents on R ranks: epoch within 1.2× of the best of R = 1 and R = N",
                f"{group} ({n} agents, R = {r['ranks']})",
                got["time_vs_best_end"],
                _status(
                    None if got["time_vs_best_end"] is None else got["time_vs_best_end"] <= 1.2
                ),
                f"best of {ends}; host memory {fmt(got['memory_vs_ref'])}× that of "
                f"R = {got['memory_ref_ranks']} (R/{got['memory_ref_ranks']} = "
                f"{fmt(got['memory_ideal'])})",
            )


def evaluate(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target and place measured: value, status (met/missed/…) and a note."""
    res = doc.get("results", {})
    floors = {r["label"]: r for r in res.get("pilot_cost", []) if r}
    device = doc.get("meta", {}).get("device", "cpu")
    rows: list[dict[str, Any]] = []
    makers: list[Callable[[], Iterable[dict]]] = [
        lambda: _overhead_rows(res.get("overhead", []), floors),
        lambda: _bytes_rows(res.get("bytes", [])),
        lambda: _speedup_rows(res.get("speedup", []), device),
        lambda: _scaling_rows(res.get("scaling", [])),
        lambda: _clients_rows(res.get("clients", [])),
        lambda: _placement_rows(doc),
    ]
    for make in makers:
        rows.extend(make())
    return rows


# ---- Markdown -------------------------------------------------------------------------


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return out


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{1000 * x:.1f}"


def _overhead_md(results: list[dict[str, Any]]) -> list[str]:
    out = ["## Target 1: overhead of cooperation", ""]
    for r in results:
        st = r["stats"]
        out += [
            f"**{r['label']}** ({r['config']} {' '.join(r['overrides'])}): {r['agents']} agents, "
            f"{r['steps_per_epoch']} steps/epoch, batch {r['batch_size']}, "
            f"K = {r['pilot_batch']}.",
            "",
        ]
        out += _table(
            ["method", "epoch s (median)", "min", "max", "n", "ratio to noncoop"],
            [[m, s["median"], s["min"], s["max"], s["n"], r["ratio"][m]] for m, s in st.items()],
        )
        phases = r.get("phases", {})
        names = sorted({p for table in phases.values() for p in table} - {"step"})
        if phases:
            out += ["", "Per-phase ms per step (mean over ranks; one profiled epoch):", ""]
            out += _table(
                ["method", *names, "step"],
                [
                    [m, *(_ms(t.get(p, {}).get("mean")) for p in names), _ms(t["step"]["mean"])]
                    for m, t in phases.items()
                ],
            )
        out.append("")
    return out


def _pilot_md(results: list[dict[str, Any]]) -> list[str]:
    out = ["## Pilot-pass cost in isolation (the floor under target 1)", ""]
    for r in results:
        out += [
            f"**{r['label']}** ({r['config']}): batch {r['batch_size']}, K = {r['pilot_batch']}, "
            f"{r['threads']} thread(s). Floor (slowest agent) separate/plain "
            f"{fmt(r['floor_ratio'])}, batched/plain {fmt(r['batched_ratio'])}.",
            "",
        ]
        out += _table(
            [
                "agent",
                "d",
                "plain ms",
                "separate ms",
                "batched ms",
                "separate/plain",
                "batched/plain",
            ],
            [
                [
                    a["agent"],
                    a["dim"],
                    _ms(a["seconds"]["plain"]),
                    _ms(a["seconds"]["separate"]),
                    _ms(a["seconds"]["batched"]),
                    a["separate_over_plain"],
                    a["batched_over_plain"],
                ]
                for a in r["agents"]
            ],
        )
        out.append("")
    return out


def _bytes_md(results: list[dict[str, Any]]) -> list[str]:
    out = ["## Target 2: bytes on the wire (per training step, whole network)", ""]
    for r in results:
        out += [
            f"**{r['label']}**: {r['agents']} agents, {r['edges']} edges, K = {r['pilot_batch']}, "
            f"d = {r['dims']}; {r['steps']} steps counted; FedAvg would move "
            f"{r['fedavg_bytes_per_step']:,} B/step (2 × Σ params × 4).",
            "",
        ]
        out += _table(
            [
                "variant",
                "measured B/step",
                "formula B/step",
                "ratio",
                "worst agent dev.",
                "of FedAvg",
            ],
            [
                [
                    v,
                    x["measured_bytes_per_step"],
                    float(x["formula_bytes_per_step"]),
                    x["ratio_to_formula"],
                    x["worst_agent_deviation"],
                    x["fraction_of_fedavg"],
                ]
                for v, x in r["variants"].items()
            ],
        )
        out.append("")
    return out


def _gpu_sharing(r: dict[str, Any]) -> str:
    if r.get("device") != "cuda":
        return ""
    if r.get("mps"):
        return f" The ranks shared the GPU through MPS (pipe {r['mps']}): kernels run concurrently."
    return " No MPS daemon: the ranks' CUDA contexts took the GPU in time slices."


def _speedup_md(results: list[dict[str, Any]]) -> list[str]:
    out = ["## Target 3: one rank per agent vs one process", ""]
    for r in results:
        th = r["threads"]
        out += [
            f"**{r['label']}** ({r['config']} {' '.join(r['overrides'])}): {r['agents']} agents, "
            f"{r['steps_per_epoch']} steps/epoch; the sequential process ran "
            f"{th['sequential']} thread(s), each parallel rank {th['parallel_per_rank']}."
            + _gpu_sharing(r),
            "",
        ]
        out += _table(
            ["mode", "epoch s (median)", "min", "max", "n", "speedup over sequential"],
            [
                [m, s["median"], s["min"], s["max"], s["n"], r["speedup"].get(m, 1.0)]
                for m, s in r["stats"].items()
            ],
        )
        out.append("")
    return out


def _scaling_md(results: list[dict[str, Any]]) -> list[str]:
    out = ["## Target 3: weak scaling (one identical agent per rank, ring graph)", ""]
    for r in results:
        out += [
            f"**{r['label']}**: agent {r['agent']} (d = {r['latent_dim']}), "
            f"{r['steps_per_epoch']} steps/epoch, Sheaf-FRL, one thread per rank.",
            "",
        ]
        phases = r.get("phases", {})
        out += _table(
            [
                "ranks",
                "epoch s (median)",
                "min",
                "max",
                "n",
                "time / time(1 rank)",
                "compute ms/step",
                "exchange+maps+penalty ms/step",
            ],
            [
                [
                    n,
                    s["median"],
                    s["min"],
                    s["max"],
                    s["n"],
                    r["time_ratio"][n],
                    _ms(_phase_sum(phases.get(n), COMPUTE)),
                    _ms(_phase_sum(phases.get(n), SHEAF_COMM)),
                ]
                for n, s in r["stats"].items()
            ],
        )
        out += [
            "",
            "Compute = data + forward + pilot forward + backward + optimizer, mean over ranks "
            "of one profiled epoch. Compute that grows with the rank count is contention for "
            "cores (or memory bandwidth), not communication.",
            "",
        ]
    return out


COMPUTE = ("data", "forward", "pilot_forward", "backward", "optimizer")
SHEAF_COMM = ("exchange", "maps", "penalty")


def _phase_sum(table: dict[str, dict[str, float]] | None, names: Iterable[str]) -> float | None:
    if not table:
        return None
    return sum(table.get(k, {}).get("mean", 0.0) for k in names)


def _clients_md(results: list[dict[str, Any]]) -> list[str]:
    out = ["## Target 4: many clients on few ranks (FedRep, 100 clients)", ""]
    rows = []
    for r in results:
        m = r["median"]
        rows.append(
            [
                r["label"],
                r["workers"],
                r.get("placement", "static"),
                r["sampled_per_round"],
                m["measured"],
                m["ideal"],
                r["ratio"]["median"],
                m.get("placed"),
                m["static_placement"],
                m["balanced_placement"],
                r["ratio_static_bound"],
                r.get("ratio_placed_bound"),
            ]
        )
    out += _table(
        [
            "launch",
            "workers",
            "placement",
            "clients/round",
            "round s (median)",
            "ideal s",
            "ratio",
            "placed s",
            "static-placement s",
            "balanced s",
            "static/ideal",
            "placed/ideal",
        ],
        rows,
    )
    out += [
        "",
        "Medians over rounds 2+ (round 1 pays for warm-up). *placed*: the busiest rank's "
        "measured training under the placement the run used, plus the average; *static* "
        "and *balanced*: the same for client c on rank 1 + c mod W, and for longest-first "
        "dealing of the measured times.",
    ]
    return [*out, ""]


def load_average(values: Any) -> str:
    """``os.getloadavg()`` as read: ``5.92, 6.24, 7.27 (1, 5, 15 min)``."""
    if not isinstance(values, list | tuple) or len(values) != 3:
        return "not known"
    return f"{', '.join(f'{v:.2f}' for v in values)} (1, 5, 15 min)"


def render_markdown(doc: dict[str, Any]) -> str:
    """The Markdown summary of a results document."""
    meta = doc.get("meta", {})
    out = [
        f"# fedsheaf benchmarks: {meta.get('tag', '')}",
        "",
        f"Size `{meta.get('size')}`, device `{meta.get('device')}`, host `{meta.get('host')}` "
        f"({meta.get('cores')} cores), started {meta.get('started')}"
        f"{', commit ' + meta['commit'][:12] if meta.get('commit') else ''}, "
        f"{fmt(meta.get('seconds'))} s in all; load average at start "
        f"{load_average(meta.get('load_average_start'))}. "
        f"Command: `{meta.get('command', '')}`.",
        "",
    ]
    out += [f"* {note}" for note in meta.get("notes", [])]
    if meta.get("notes"):
        out.append("")
    out += ["## Targets", ""]
    out += _table(
        ["#", "target", "where", "measured", "status", "note"],
        [
            [r["id"], r["target"], r["where"], r["value"], r["status"], r["note"]]
            for r in evaluate(doc)
        ],
    )
    out.append("")
    res = doc.get("results", {})
    sections = [
        ("overhead", _overhead_md),
        ("pilot_cost", _pilot_md),
        ("bytes", _bytes_md),
        ("speedup", _speedup_md),
        ("scaling", _scaling_md),
        ("clients", _clients_md),
    ]
    for case, render in sections:
        present = [r for r in res.get(case, []) if r]
        if present:
            out += render(present)
    if any(res.get("placement", [])):
        out += _placement_md(doc)
    out += _memory_md(doc.get("launches", []))
    failed = [la for la in doc.get("launches", []) if la.get("returncode") != 0]
    if failed:
        out += ["## Launches without a result", ""]
        out += [_launch_failure(la) for la in failed]
        out.append("")
    retried = [la for la in doc.get("launches", []) if la.get("retried_after")]
    if retried:
        out += ["## Launches started twice", ""]
        out += [
            f"* {la['label']}: the first start ended with exit {la['retried_after']['returncode']} "
            f"as mpiexec failed to start the job (log {la['retried_after']['log']})"
            for la in retried
        ]
        out.append("")
    return "\n".join(out)


def _placement_md(doc: dict[str, Any]) -> list[str]:
    out = ["## N agents on R ranks (placement)", ""]
    for group, results in placement_groups(doc).items():
        first = results[0]
        ratios = placement_ratios(results)
        out += [
            f"**{group}** ({first['config']} {' '.join(first['overrides'])}): "
            f"{first['agents']} agents, {first['edges']} edges, {first['algorithm']}, "
            f"{first['steps_per_epoch']} steps/epoch, {first['placement']} placement, "
            f"device {first.get('device', 'cpu')}"
            + (f", malloc {first['malloc']}" if first.get("malloc") else "")
            + _gpu_sharing(first),
            "",
        ]
        out += _table(
            [
                "R",
                "agents per rank",
                "threads per rank",
                "edges between ranks",
                "epoch s (median)",
                "min",
                "max",
                "n",
                "epoch / best of R=1, R=N",
                "peak RSS per rank (largest)",
                "peak RSS summed over ranks",
                "sum / ref",
                "GPU (largest rank)",
                "bytes over MPI",
                "bytes of the algorithm",
            ],
            [
                [
                    f"{r['ranks']} (of {r['borrowed']})" if r.get("borrowed") else r["ranks"],
                    _spread(r["agents_per_rank"]),
                    r["threads_per_rank"],
                    f"{r['cut_edges']} of {r['edges']}",
                    r["stats"]["median"],
                    r["stats"]["min"],
                    r["stats"]["max"],
                    r["stats"]["n"],
                    ratios[r["ranks"]]["time_vs_best_end"],
                    human_bytes(r["memory"].get("peak_rss_bytes_max")),
                    human_bytes(r["memory"].get("peak_rss_bytes_total")),
                    ratios[r["ranks"]]["memory_vs_ref"],
                    human_bytes(r["memory"].get("peak_cuda_bytes_max")),
                    human_bytes(r["mpi_bytes_total"]),
                    human_bytes(r["algorithm_bytes_total"]),
                ]
                for r in results
            ],
        )
        ref = ratios[first["ranks"]]["memory_ref_ranks"]
        out += [
            "",
            f"Epoch: barrier to barrier over all ranks, training plus the map refresh, no "
            f"evaluation (a warm-up epoch first). sum / ref: the peak RSS summed over ranks "
            f"over that of R = {ref} (holding every agent on R ranks ideally cuts it to "
            f"R/{ref}). Bytes over MPI: what crossed between ranks; bytes of the algorithm: "
            "the per-edge traffic of SPEC §2, whatever the placement (evaluation included).",
            "",
        ]
    return out


def _spread(sizes: list[int]) -> str:
    """``[5, 5, 5]`` → ``"5"``, ``[34, 33, 33]`` → ``"33-34"``."""
    lo, hi = min(sizes), max(sizes)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _memory_md(launches: list[dict[str, Any]]) -> list[str]:
    """Each launch's peak memory per rank (:mod:`fedsheaf.util.memory`): a scheduler's RSS
    view, the part of it that is shared library files, and the GPU allocator's peak."""
    rows = []
    for la in launches:
        mem = la.get("memory") or {}
        if not mem.get("peak_rss_bytes"):
            continue  # did not finish, or from before memory was recorded
        files = mem.get("file_rss_bytes_max")
        rows.append(
            [
                la["label"],
                la.get("ranks"),
                human_bytes(mem["peak_rss_bytes_max"]),
                human_bytes(files) if files is not None else "–",
                human_bytes(mem["peak_rss_bytes_total"]),
                human_bytes(mem.get("peak_cuda_bytes_max")),
            ]
        )
    if not rows:
        return []
    out = [
        "## Memory (peak per rank, over all of a launch's cases)",
        "",
        "Peak resident set per rank (what a scheduler's RSS accounting sees), the part of it "
        "that is library files (torch's above all; a node's ranks share these pages, so a "
        "node holds them once), the sum over the launch's ranks, and on a GPU the most "
        "memory torch allocated on a rank (its CUDA context and cache come on top).",
        "",
    ]
    out += _table(
        ["launch", "ranks", "peak RSS (largest rank)", "library files (most)", "sum", "GPU"],
        rows,
    )
    return [*out, ""]


def _launch_failure(la: dict[str, Any]) -> str:
    if la.get("skipped"):
        return f"* {la['label']}: skipped ({la['skipped']})"
    code = la.get("returncode")
    why = "stopped at its time limit" if code == 124 else f"exit {code}"
    return f"* {la['label']}: {why}, log {la.get('log')}"


def write(out_dir: str | Path, tag: str, doc: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``<tag>.json`` (with the evaluated targets) and ``<tag>.md`` atomically."""
    out = Path(out_dir)
    doc = dict(doc, targets=evaluate(doc))
    json_path, md_path = out / f"{tag}.json", out / f"{tag}.md"
    atomic_write_json(json_path, doc)
    atomic_write_text(md_path, render_markdown(doc) + "\n")
    return json_path, md_path
