"""`fedsheaf report`: λ chosen on validation, mean ± std over seeds, tables and figures.

The fake runs are written the way a real run writes them: a resolved config through
``dump_config(load_config(...))`` and ``RunDir.write_config``/``write_summary``.
"""

import csv
import io
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.config.sections import dump_config, load_config
from fedsheaf.ops.report import collect, grid_points, markdown, select, write_report
from fedsheaf.rundir.files import RunDir
from fedsheaf.util.atomic import atomic_write_json
from fedsheaf.util.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _run(root: Path, name: str, overrides: list[str], summary: dict, config="configs/mnist15.yaml"):
    cfg = load_config(REPO / config, overrides)
    rd = RunDir(root / name)
    rd.write_config(dump_config(cfg))
    rd.write_summary({"name": cfg.name, "algorithm": cfg.algorithm, "seed": cfg.seed, **summary})
    return rd.path


def _summary(val: float, test: float, comm_test: float) -> dict:
    return {
        "score_val": val,
        "private_acc_val": val,
        "comm_acc_val": val,
        "private_acc": test,
        "comm_acc": comm_test,
        "comm_acc_deg": comm_test + 0.01,
        "wall_seconds": 1.0,
    }


@pytest.fixture
def study(tmp_path):
    """Two λ for Sheaf-FRL (λ=1 best on validation, λ=0.01 best on test), noncoop, 3 seeds."""
    root = tmp_path / "runs"
    tests = {0: (0.80, 0.60), 1: (0.82, 0.64), 2: (0.84, 0.65)}
    for s in (0.6, 1.0):
        for seed, (priv, comm) in tests.items():
            common = [f"data.shift={s}", f"seed={seed}"]
            _run(root, f"sf-{s}-1-{seed}", [*common, "sheaf.lam=1"], _summary(0.9, priv, comm))
            _run(root, f"sf-{s}-.01-{seed}", [*common, "sheaf.lam=0.01"], _summary(0.5, 0.99, 0.99))
            _run(root, f"nc-{s}-{seed}", [*common, "algorithm=noncoop"], _summary(0.7, priv, 0.3))
    return root


def test_lambda_is_chosen_by_validation_score_not_test(study):
    rows = select(collect([study]))
    assert [(r.method, r.shift) for r in rows] == [
        ("noncoop", 0.6),
        ("noncoop", 1.0),
        ("sheaf_frl", 0.6),
        ("sheaf_frl", 1.0),
    ]
    sheaf = [r for r in rows if r.method == "sheaf_frl"]
    for r in sheaf:
        assert r.hyper == (("sheaf.lam", 1.0),)  # not the test-best λ = 0.01
        assert r.candidates == 2 and r.seeds == 3 and r.score_val == pytest.approx(0.9)
        assert r.mean["private_acc"] == pytest.approx(statistics.fmean([0.80, 0.82, 0.84]))
        assert r.std["private_acc"] == pytest.approx(statistics.stdev([0.80, 0.82, 0.84]))
        assert r.mean["comm_acc"] == pytest.approx(statistics.fmean([0.60, 0.64, 0.65]))
        assert r.mean["comm_acc_deg"] == pytest.approx(statistics.fmean([0.61, 0.65, 0.66]))
    assert all(r.dim is None for r in rows)  # Table-2 agents have different d
    assert all(r.hyper == () and r.candidates == 1 for r in rows if r.method == "noncoop")


def test_markdown_csv_and_shift_figure(study, tmp_path):
    out = tmp_path / "report"
    written = {p.name for p in write_report(collect([study]), out)}
    assert written == {
        "comparison.md",
        "comparison.csv",
        "runs.csv",
        "grid.md",
        "grid.csv",
        "accuracy_vs_shift.png",
    }
    md = (out / "comparison.md").read_text()
    assert "| sheaf_frl | 0.6 | het. | lam=1 (of 2) | 3 | 0.900 | 0.820 ± 0.020 |" in md
    rows = list(csv.DictReader(io.StringIO((out / "comparison.csv").read_text())))
    assert len(rows) == 4 and {r["selected"] for r in rows if r["method"] == "sheaf_frl"} == {
        "lam=1"
    }
    assert len((out / "runs.csv").read_text().splitlines()) == 1 + 18
    assert (out / "accuracy_vs_shift.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_grid_point_is_listed_with_the_selected_one_marked(study, tmp_path):
    points = grid_points(collect([study]))
    listed = [(r.method, r.shift, r.hyper, chosen) for r, chosen in points]
    lam = "sheaf.lam"
    assert listed == [
        ("noncoop", 0.6, (), True),
        ("noncoop", 1.0, (), True),
        ("sheaf_frl", 0.6, ((lam, 0.01),), False),  # the better test numbers: not chosen
        ("sheaf_frl", 0.6, ((lam, 1.0),), True),
        ("sheaf_frl", 1.0, ((lam, 0.01),), False),
        ("sheaf_frl", 1.0, ((lam, 1.0),), True),
    ]
    unchosen = points[2][0]
    assert unchosen.seeds == 3 and unchosen.score_val == pytest.approx(0.5)
    assert unchosen.mean["private_acc"] == pytest.approx(0.99) and unchosen.std["comm_acc"] == 0
    out = tmp_path / "report"
    write_report(collect([study]), out)
    md = (out / "grid.md").read_text()
    assert "| sheaf_frl | 0.6 | het. | lam=0.01 | 3 | 0.500 | 0.990 ± 0.000 |" in md
    assert md.count("| ✓ |") == 4
    rows = list(csv.DictReader(io.StringIO((out / "grid.csv").read_text())))
    assert [r["selected"] for r in rows] == ["1", "1", "0", "1", "0", "1"]
    # a report of runs without a searched grid has no grid table, and removes a stale one
    nc = tmp_path / "noncoop"
    shutil.copytree(study, nc, ignore=shutil.ignore_patterns("sf-*"))
    assert "grid.md" not in {p.name for p in write_report(collect([nc]), out)}
    assert not (out / "grid.md").exists() and not (out / "grid.csv").exists()


def test_grid_points_are_ordered_by_value():
    from fedsheaf.ops.report import _hyper_order

    ks = [(("sheaf.pilot_batch", k),) for k in (64, 8, 16, 4)]
    assert sorted(ks, key=_hyper_order) == [(("sheaf.pilot_batch", k),) for k in (4, 8, 16, 64)]


def test_one_seed_has_no_std_and_a_bottleneck_figure_appears_for_several_d(tmp_path):
    root = tmp_path / "runs"
    for d, acc in ((16, 0.7), (128, 0.9)):
        agents = (
            f"agents=[{{encoder: [4, {d}], head: [8], classes: [4, 5, 6, 7, 8, 9]}}, "
            f"{{encoder: [8, {d}], head: [8], classes: [0, 1, 2, 3, 4, 5]}}]"
        )
        _run(root, f"p{d}", [agents], _summary(0.8, acc, acc - 0.1), config="configs/pair.yaml")
    records = collect([root])
    rows = select(records)
    assert [(r.dim, r.seeds) for r in rows] == [(16, 1), (128, 1)]
    assert all(math.isnan(r.std["private_acc"]) for r in rows)
    assert "| 0.700 |" in markdown(rows)
    names = {p.name for p in write_report(records, tmp_path / "rep")}
    assert "accuracy_vs_bottleneck.png" in names and "accuracy_vs_shift.png" not in names
    # one seed's std is an empty cell (it was "nan" here, "–" in the Markdown)
    table = list(csv.DictReader(io.StringIO((tmp_path / "rep" / "comparison.csv").read_text())))
    assert [r["private_acc_std"] for r in table] == ["", ""]
    assert [r["private_acc_mean"] for r in table] == ["0.7", "0.9"]


def test_study_manifest_names_methods_and_grid_keys(tmp_path, capsys):
    root = tmp_path / "sweep"
    dirs = [
        _run(
            root / "runs",
            f"r{k}",
            ["sheaf.variant=strict", f"sheaf.pilot_batch={pb}"],
            _summary(v, 0.5, 0.5),
        )
        for k, (pb, v) in enumerate([(16, 0.4), (32, 0.6)])
    ]
    atomic_write_json(
        root / "study.json",
        {
            "study": "x",
            "axis": "s",
            "grid_keys": ["sheaf.pilot_batch"],
            "runs": [
                {"dir": str(d), "method": "strict-privacy", "grid": {"sheaf.pilot_batch": pb}}
                for d, pb in zip(dirs, (16, 32), strict=True)
            ],
        },
    )
    rows = select(collect([root / "runs" / "r0", root / "runs" / "r1"]))
    assert len(rows) == 1 and rows[0].method == "strict-privacy"
    assert rows[0].hyper == (("sheaf.pilot_batch", 32),)
    report = ["report", "--out", str(tmp_path / "report")]
    assert cli.main([*report, str(root)]) == 0
    assert "planned" not in capsys.readouterr().err
    # a planned run that failed (here: no summary.json) is named, not silently left out
    (dirs[1] / "summary.json").unlink()
    assert cli.main([*report, str(root)]) == 0
    assert (
        "report: warning: 1 of the 2 runs the sweep planned (study.json) have no readable "
        "summary.json (failed, unfinished or not run) and are left out: r1\n"
    ) in capsys.readouterr().err
    shutil.rmtree(dirs[1])  # or no directory at all
    assert cli.main([*report, str(root)]) == 0
    assert "1 of the 2 runs the sweep planned" in capsys.readouterr().err
    assert cli.main([*report, str(dirs[0])]) == 0  # one run asked for: no others missed
    assert "planned" not in capsys.readouterr().err
    # without a manifest the method comes from the config
    (root / "study.json").unlink()
    assert select(collect([root]))[0].method == "sheaf_frl/strict"


def test_cli_report_and_errors(study, tmp_path, capsys):
    assert cli.main(["report", str(study), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "comparison.md" in out and "| noncoop | 1 |" in out
    assert cli.main(["report", str(tmp_path / "nothing")]) == 2
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no finished runs"):
        collect([tmp_path / "empty"])
    assert json.loads((study / "nc-0.6-0" / "summary.json").read_text())["algorithm"] == "noncoop"


def test_a_corrupt_study_manifest_is_one_error_line(study, tmp_path, capsys):
    (study / "study.json").write_text("{not json")
    assert cli.main(["report", str(study), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedsheaf: error: {study / 'study.json'} is not valid JSON: ")
    assert err.count("\n") == 1


def test_nested_runs_are_skipped_and_repeated_seeds_are_said(tmp_path, capsys):
    root = tmp_path / "runs"
    outer = _run(root, "a", ["seed=1"], _summary(0.7, 0.8, 0.5))
    _run(outer, "a", ["seed=1"], _summary(0.6, 0.1, 0.1))  # output.dir=<a run> by mistake
    records = collect([root])
    assert [r.path for r in records] == [outer.resolve()]
    out, err = capsys.readouterr()
    assert f"report: skipping {(outer / 'a').resolve()}: it lies inside the run directory" in out
    assert "warning" not in out + err

    _run(root, "b", ["seed=1"], _summary(0.7, 0.7, 0.5))  # the same run under another name
    _run(root, "c", ["seed=2"], _summary(0.7, 0.7, 0.5))
    assert len(collect([root])) == 3
    out, err = capsys.readouterr()
    assert err.count("warning") == 1 and "warning" not in out
    assert "2 sheaf_frl runs with the same setting and seed 1 are averaged as if" in err
    assert str(root.resolve() / "b") in err and "/c" not in err.split("warning")[1]


def test_runs_of_other_experiments_averaged_as_seeds_are_a_warning(tmp_path, capsys):
    root = tmp_path / "runs"
    _run(root, "a", ["seed=1"], _summary(0.7, 0.8, 0.5))
    _run(root, "b", ["seed=2", "output.name=b", "train.eval_every=3"], _summary(0.7, 0.8, 0.5))
    collect([root])
    assert "warning" not in capsys.readouterr().err  # seeds of one experiment
    _run(root, "c", ["seed=3", "train.epochs=2", "train.lr=0.5"], _summary(0.7, 0.8, 0.5))
    _run(root, "d", ["seed=1", "sheaf.lam=1"], _summary(0.7, 0.8, 0.5))  # another grid point
    assert len(select(collect([root]))) == 1  # one row: λ is chosen among the grid points
    err = capsys.readouterr().err
    assert err.count("warning") == 1, err
    assert (
        "report: warning: 3 sheaf_frl runs averaged as seeds of one setting differ in "
        "train.epochs (100 vs 2); train.lr (0.01 vs 0.5): "
    ) in err
    assert "/d" not in err


def test_runs_on_several_datasets_are_a_warning(tmp_path, capsys):
    root = tmp_path / "runs"
    _run(root, "a", ["seed=1"], _summary(0.7, 0.8, 0.5))
    collect([root])
    assert "datasets" not in capsys.readouterr().err
    _run(root, "b", ["seed=2", "data.dataset=fashionmnist"], _summary(0.7, 0.8, 0.5))
    collect([root])
    err = capsys.readouterr().err
    assert "report: warning: the runs use 2 datasets (fashionmnist, mnist); the comparison" in err


def test_a_damaged_run_is_skipped_with_a_warning(study, capsys):
    before = len(collect([study]))
    damaged = _run(study, "damaged", ["seed=9"], _summary(0.5, 0.5, 0.5))
    (damaged / "config.yaml").write_text("name: [\n")
    assert len(collect([study])) == before
    err = capsys.readouterr().err
    assert f"report: warning: skipping {damaged.resolve()}: run config" in err
    assert "is not valid YAML" in err


@pytest.mark.parametrize(
    "manifest", ['{"runs": 5}', '{"runs": [{"name": 1}]}', '{"runs": [], "grid_keys": "lam"}']
)
def test_a_damaged_study_json_is_one_clear_error(tmp_path, capsys, manifest):
    from fedsheaf.cli import main as cli

    _run(tmp_path / "runs", "r", [], _summary(0.5, 0.8, 0.6))
    (tmp_path / "study.json").write_text(manifest)
    assert cli.main(["report", str(tmp_path), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'study.json'} is not a sweep manifest" in err and "Traceback" not in err


def test_a_grid_over_a_list_valued_key_is_reported(tmp_path):
    """Grid values that are lists (here the head_fedavg backbone widths) are compared as
    values; they used to stop the report with "unhashable type: 'list'"."""
    root = tmp_path / "sweep"
    widths = ([64, 64], [128, 128])
    dirs = [
        _run(root / "runs", f"w{k}", [f"head.backbone={w}"], _summary(v, 0.5, 0.5))
        for k, (w, v) in enumerate(zip(widths, (0.4, 0.6), strict=True))
    ]
    atomic_write_json(
        root / "study.json",
        {
            "study": "x",
            "axis": "s",
            "grid_keys": ["head.backbone"],
            "runs": [
                {"dir": str(d), "method": "m", "grid": {"head.backbone": w}}
                for d, w in zip(dirs, widths, strict=True)
            ],
        },
    )
    records = collect([root])
    assert select(records)[0].hyper == (("head.backbone", (128, 128)),)
    assert [chosen for _, chosen in grid_points(records)] == [False, True]
    assert "grid.md" in {p.name for p in write_report(records, tmp_path / "report")}
    assert "| head.backbone=[128, 128] | 1 |" in (tmp_path / "report" / "grid.md").read_text()
