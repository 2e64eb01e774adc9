"""`fedsheaf report` over any run directories: per-run table, learning curves, bytes plot.

Run directories are written with the real writer (``RunDir``) and a resolved config
(``dump_config(load_config(...))``), with metrics records shaped like the trainers'.
"""

import csv
import io
import shutil
import struct
from pathlib import Path

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.config.sections import dump_config, load_config
from fedsheaf.ops.report_runs import (
    BASE_COLS,
    DECENTRALIZED_COLS,
    SERVER_COLS,
    find_runs,
    runs_table_csv,
    runs_table_markdown,
    server_seed_groups,
    server_seed_means,
    write_runs_report,
)
from fedsheaf.rundir.files import RunDir
from fedsheaf.util.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_decentralized(
    root: Path, name: str, epochs: int, seed: int = 0, shift: float = 0.7, finished: bool = True
) -> Path:
    """A quickstart-style Sheaf-FRL run: per-epoch network records (+ per-agent ones)."""
    cfg = load_config(
        REPO / "configs/quickstart.yaml",
        [f"seed={seed}", f"train.epochs={epochs}", f"data.shift={shift}"],
    )
    rd = RunDir(root / name)
    rd.write_config(dump_config(cfg))
    rec: dict = {}
    for e in range(1, epochs + 1):
        rec = {
            "epoch": e,
            "loss": 2.0 / e,
            "seconds": 0.5,
            "bytes_sent": 1000,
            "private_acc": 0.5 + 0.1 * e + 0.01 * seed,
            "comm_acc": 0.2 + 0.05 * e,
            "comm_acc_deg": 0.21 + 0.05 * e,
            "private_acc_val": 0.5,
            "comm_acc_val": 0.3,
            "comm_acc_deg_val": 0.3,
            "score_val": 0.3 + 0.01 * e,
            "eval_bytes_sent": 100,
            "agents": [{"agent": 0, "epoch": e, "private_acc": 0.4, "bytes_sent": 250}],
        }
        rd.append_metrics(rec)
    if finished:
        summary = {k: v for k, v in rec.items() if k != "agents"}
        summary.update(
            name=cfg.name, algorithm=cfg.algorithm, seed=cfg.seed, wall_seconds=1.75, agents=[]
        )
        rd.write_summary(summary)
    return rd.path


def make_server(
    root: Path,
    name: str,
    rounds: int,
    algorithm: str = "fedrep",
    finished: bool = True,
    final_round: bool = True,
    seed: int = 3,
    overrides: tuple[str, ...] = (),
) -> Path:
    """A FedRep-style run: a record per round, accuracy every 2nd round, a final fine-tune
    (score 0.35 at seed 3, 0.01 more per seed above)."""
    cfg = load_config(
        REPO / "configs/fedrep_fmnist_100c2.yaml",
        [f"algorithm={algorithm}", f"federated.rounds={rounds}", f"seed={seed}", *overrides],
    )
    rd = RunDir(root / name)
    rd.write_config(dump_config(cfg))
    for r in range(1, rounds + 1):
        rec = {"round": r, "final": False, "loss": 1.0 / r, "seconds": 2.0}
        rec.update(bytes_up=3000, bytes_down=2000 if r > 1 else 4000)
        if r % 2 == 0:
            rec.update(acc=0.1 * r, client_acc=[0.1 * r] * 3)
        rd.append_metrics(rec)
    if final_round:
        rd.append_metrics(
            {"round": rounds + 1, "final": True, "acc": 0.95, "loss": 0.1, "seconds": 5.0}
            | {"bytes_up": 50, "bytes_down": 0}
        )
    if finished:
        rd.write_summary(
            {
                "name": cfg.name,
                "algorithm": algorithm,
                "seed": seed,
                "score": 0.35 + 0.01 * (seed - 3),
                "score_is": "mean acc over rounds 3-4",
                "acc_last": 0.1 * rounds,
                "final_acc": 0.95 if final_round else None,
                "rounds": rounds,
                "wall_seconds": 12.5,
                "bytes_up_total": 3000 * rounds + 50,
                "bytes_down_total": 2000 * rounds + 2000,
            }
        )
    return rd.path


def make_head(root: Path, name: str, rounds: int = 3) -> Path:
    """A head_fedavg run: test MSE and Gram errors instead of accuracy."""
    cfg = load_config(REPO / "configs/head_fedavg_diabetes3.yaml", [f"federated.rounds={rounds}"])
    rd = RunDir(root / name)
    rd.write_config(dump_config(cfg))
    for r in range(1, rounds + 1):
        rd.append_metrics(
            {"round": r, "final": False, "test_mse": 2.0 / r, "gram_err_star": 10.0**-r}
            | {"loss": 0.5, "seconds": 1.0, "bytes_up": 468, "bytes_down": 324}
        )
    rd.write_summary(
        {
            "name": cfg.name,
            "algorithm": "head_fedavg",
            "seed": 0,
            "score": 2.0 / rounds,
            "test_mse": 2.0 / rounds,
            "final": {"gram_err_star": 10.0**-rounds},
            "wall_seconds": 3.0,
            "bytes_up_total": 468 * rounds,
            "bytes_down_total": 324 * rounds,
        }
    )
    return rd.path


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def mixed(tmp_path):
    """A folder of runs of both families (one still running) plus one run dir elsewhere."""
    root = tmp_path / "runs"
    make_decentralized(root, "sf-a", epochs=3)
    make_decentralized(root, "sf-b", epochs=2, seed=1, finished=False)
    make_server(root / "deeper", "fedrep", rounds=4)
    make_head(root, "head")
    single = make_server(tmp_path / "elsewhere", "fedavg", rounds=2, algorithm="fedavg")
    return root, single


def test_table_has_one_row_per_run_with_the_family_metrics(mixed):
    root, single = mixed
    runs = find_runs([root, single, root / "sf-a"])  # a run named twice is listed once
    text = runs_table_csv(runs)
    reader = csv.DictReader(io.StringIO(text))
    assert reader.fieldnames == [*BASE_COLS, *DECENTRALIZED_COLS, *SERVER_COLS]
    rows = {r["run"]: r for r in reader}
    assert sorted(rows) == ["fedavg", "fedrep", "head", "sf-a", "sf-b"]

    a = rows["sf-a"]
    assert (a["algorithm"], a["family"], a["seed"], a["status"]) == (
        "sheaf_frl",
        "decentralized",
        "0",
        "finished",
    )
    assert int(a["steps"]) == 3 and float(a["wall_seconds"]) == 1.75
    assert int(a["bytes"]) == 3 * 1000 and int(a["eval_bytes"]) == 3 * 100  # apart
    assert float(a["private_acc"]) == pytest.approx(0.8)
    assert float(a["score_val"]) == pytest.approx(0.33)
    assert a["acc"] == "" and a["test_mse"] == ""

    b = rows["sf-b"]  # no summary: last record, summed seconds
    assert b["status"] == "running" and b["seed"] == "1" and int(b["steps"]) == 2
    assert float(b["wall_seconds"]) == 1.0 and int(b["bytes"]) == 2000
    assert float(b["private_acc"]) == pytest.approx(0.71)

    f = rows["fedrep"]
    assert (f["family"], f["seed"], f["steps"]) == ("server", "3", "4")  # not the fine-tune
    assert int(f["bytes"]) == 3000 * 4 + 50 + 2000 * 4 + 2000 and f["eval_bytes"] == ""
    assert float(f["acc"]) == pytest.approx(0.4) and float(f["final_acc"]) == 0.95
    assert f["private_acc"] == ""

    h = rows["head"]
    assert float(h["test_mse"]) == pytest.approx(2 / 3)
    assert float(h["gram_err_star"]) == pytest.approx(1e-3) and h["acc"] == ""

    md = runs_table_markdown(runs)
    assert "## Decentralized runs" in md and "## Server-based runs" in md
    assert "| sf-a | sheaf_frl | 0 | finished | 3 | 0.800 | 0.350 | 0.360 | 0.330 |" in md
    assert "| sf-b | sheaf_frl | 1 | running | 2 |" in md
    assert "| fedavg | fedavg | 3 | finished | 2 | 0.200 | 0.350 | 0.950 |" in md
    assert "| train bytes | eval bytes |" in md and "| wall s | bytes |" in md
    assert "| 3.00 kB | 300 B |" in md  # sf-a's training and evaluation bytes, readable


def test_server_only_markdown_drops_columns_no_run_has(tmp_path):
    make_server(tmp_path, "fedrep", rounds=2)
    md = runs_table_markdown(find_runs([tmp_path]))
    assert "Decentralized" not in md and "test_mse" not in md and "| acc |" in md


def test_runs_that_recorded_their_peak_memory_get_a_column(tmp_path):
    """Runs from before memory was recorded keep their table as it was (no column)."""
    import json

    from fedsheaf.util.memory import per_rank

    old = make_decentralized(tmp_path, "old", epochs=2)
    assert "peak" not in runs_table_markdown(find_runs([old]))
    assert "peak_rss_bytes" not in runs_table_csv(find_runs([old]))
    new = make_decentralized(tmp_path, "new", epochs=2)
    summary = json.loads((new / "summary.json").read_text())
    summary["memory"] = per_rank([{"rss": 900_000_000}, {"rss": 1_200_000_000}])
    (new / "summary.json").write_text(json.dumps(summary))
    runs = find_runs([tmp_path])
    md = runs_table_markdown(runs).splitlines()
    assert md[2].endswith("| wall s | train bytes | eval bytes | peak RSS a rank |")
    assert md[4].startswith("| new |") and md[4].endswith("| 1.20 GB |")
    assert md[5].startswith("| old |") and md[5].endswith("| – |")
    rows = list(csv.DictReader(io.StringIO(runs_table_csv(runs))))
    assert [r["peak_rss_bytes"] for r in rows] == ["1200000000", ""]


def test_torn_last_line_is_skipped(tmp_path):
    path = make_decentralized(tmp_path, "torn", epochs=2, finished=False)
    with open(path / "metrics.jsonl", "a") as fh:
        fh.write('{"epoch": 3, "loss": 0.5, "priv')
    (run,) = find_runs([path])
    assert run.final["steps"] == 2 and len(run.records) == 2


def test_lines_that_are_not_records_and_damaged_runs_are_skipped(tmp_path, capsys):
    path = make_decentralized(tmp_path, "odd", epochs=2)
    with open(path / "metrics.jsonl", "a") as fh:
        fh.write('[1, 2]\n"text"\n')
    (run,) = find_runs([path])
    assert len(run.records) == 2
    bad = make_decentralized(tmp_path, "bad", epochs=2)
    (bad / "summary.json").write_text("{not json")
    assert [r.path.name for r in find_runs([tmp_path])] == ["odd"]
    err = capsys.readouterr().err
    assert (
        f"report: warning: skipping {bad.resolve()}: {bad.resolve()}/summary.json is not valid"
        in err
    )
    with pytest.raises(ConfigError, match="summary.json is not valid JSON"):
        find_runs([bad])  # nothing else to show: the reason is the error


def test_write_runs_report_pngs_are_valid(mixed, tmp_path):
    root, single = mixed
    out = tmp_path / "rep"
    written = write_runs_report(find_runs([root, single]), out)
    names = {p.name for p in written}
    assert names == {
        "runs_table.md",
        "runs_table.csv",
        "learning_curves.png",
        "bytes_per_round.png",
        "server_means.md",  # the finished FedRep, FedAvg and head_fedavg runs
        "server_means.csv",
    }
    w, h = _png_size(out / "learning_curves.png")
    assert w > 3 * h  # three panels side by side: accuracy, test MSE, loss
    assert _png_size(out / "bytes_per_round.png")[0] > 0
    assert not list(out.glob(".*.tmp"))  # atomic writes left nothing behind


def test_cli_mixed_runs_with_a_study_keeps_shift_figure(tmp_path, capsys):
    root = tmp_path / "study"
    for s in (0.3, 1.0):
        for seed in (0, 1):
            make_decentralized(root, f"sf-{s}-{seed}", epochs=2, seed=seed, shift=s)
    make_server(root, "fedrep", rounds=2)
    out = tmp_path / "rep"
    assert cli.main(["report", str(root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in (
        "runs_table.md",
        "runs_table.csv",
        "learning_curves.png",
        "bytes_per_round.png",
        "comparison.md",
        "comparison.csv",
        "runs.csv",
        "accuracy_vs_shift.png",
    ):
        assert (out / name).is_file() and str(out / name) in printed
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == PNG_MAGIC
    assert "## Server-based runs" in printed and "## Comparison" in printed
    # the study comparison only sees the decentralized runs: two settings, one method
    comp = list(csv.DictReader(io.StringIO((out / "comparison.csv").read_text())))
    assert [(r["method"], r["shift"], r["seeds"]) for r in comp] == [
        ("sheaf_frl", "0.3", "2"),
        ("sheaf_frl", "1.0", "2"),
    ]


def test_cli_server_runs_only_and_errors(tmp_path, capsys):
    make_server(tmp_path / "runs", "fedrep", rounds=2, final_round=False)
    out = tmp_path / "rep"
    assert cli.main(["report", str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert not (out / "comparison.md").exists() and (out / "learning_curves.png").is_file()
    assert "## Comparison" not in capsys.readouterr().out
    assert cli.main(["report", str(tmp_path / "missing")]) == 2
    assert "no such run" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no run directories"):
        find_runs([tmp_path / "empty"])


def test_the_centralized_baselines_count_their_server_line(tmp_path):
    from fedsheaf.ops.report_runs import RunInfo, step_bytes
    from fedsheaf.ops.watch import format_record

    rec = {"epoch": 2, "loss": 0.5, "bytes_sent": 1000, "eval_bytes_sent": 200}
    rec.update(server_bytes_sent=3000, server_bytes_received=4000)
    cfg = {"algorithm": "fedproto", "train": {"epochs": 3}}
    assert step_bytes(RunInfo(tmp_path, cfg, [rec], None), rec) == 8000  # evaluation apart
    line = format_record(rec, cfg)
    assert line is not None
    assert "sent 1.0 kB training + 0.2 kB evaluation  server up 3.0 kB down 4.0 kB" in line
    plain = {k: rec[k] for k in ("epoch", "loss", "bytes_sent")}
    assert step_bytes(RunInfo(tmp_path, {"algorithm": "sheaf_frl"}, [plain], None), plain) == 1000


def test_the_bytes_figure_leaves_out_runs_that_moved_nothing(tmp_path):
    from fedsheaf.ops.report_runs import RunInfo, bytes_series

    def run(name, algorithm, sent):
        recs = [{"epoch": e, "bytes_sent": sent, "eval_bytes_sent": 500} for e in (1, 2)]
        return RunInfo(tmp_path / name, {"algorithm": algorithm}, recs, None)

    runs = [run("nc", "noncoop", 0), run("sf", "sheaf_frl", 1000)]
    series, silent = bytes_series(runs)  # the evaluation's bytes are not training traffic
    assert series == {1: [(1, 1000), (2, 1000)]} and silent == ["nc"]


def test_server_runs_are_averaged_over_seeds_per_setting(tmp_path, capsys):
    root = tmp_path / "runs"
    make_server(root, "fedrep-s3", rounds=4, seed=3)
    # placement changes no number: the seed of another placement joins the group
    make_server(root, "fedrep-s5", rounds=4, seed=5, overrides=("federated.placement=static",))
    make_server(root, "fedrep-lr", rounds=4, seed=3, overrides=("train.lr=0.05",))
    make_server(root, "fedavg", rounds=4, algorithm="fedavg", seed=4)
    make_server(root, "fedrep-running", rounds=4, seed=6, finished=False)
    make_head(root, "head")
    make_decentralized(root, "sf", epochs=2)
    rows = server_seed_means(server_seed_groups(find_runs([root])))
    got = {(r["algorithm"], r["setting"]): r for r in rows}
    assert set(got) == {
        ("fedavg", "–"),
        ("fedrep", "train.lr=0.01"),
        ("fedrep", "train.lr=0.05"),
        ("head_fedavg", "–"),
    }
    two = got[("fedrep", "train.lr=0.01")]
    assert (two["seeds"], two["seed_list"], two["rounds"]) == (2, "3 5", "4")
    assert two["score_mean"] == pytest.approx(0.36)
    assert two["score_std"] == pytest.approx(0.02 / 2**0.5)  # sample std of 0.35, 0.37
    assert two["final_acc_mean"] == pytest.approx(0.95) and two["test_mse_mean"] is None
    one = got[("fedrep", "train.lr=0.05")]
    assert one["seeds"] == 1 and one["score_mean"] == pytest.approx(0.35)
    assert one["score_std"] is None  # one seed: no spread to show
    assert got[("head_fedavg", "–")]["test_mse_mean"] == pytest.approx(2 / 3)
    assert "lower is better" not in two["score_is"] and "rounds 3-4" in two["score_is"]
    assert capsys.readouterr().err == ""

    out = tmp_path / "rep"
    assert cli.main(["report", str(root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    md = (out / "server_means.md").read_text()
    assert md.split("\n", 2)[2] in printed  # the table after the file's title
    assert "| fedrep | train.lr=0.01 | 2 (3 5) | 4 | 0.360 ± 0.014 | 0.400 ± 0 |" in md
    table = list(csv.DictReader(io.StringIO((out / "server_means.csv").read_text())))
    assert [(r["algorithm"], r["seeds"]) for r in table] == [
        ("fedavg", "1"),
        ("fedrep", "2"),
        ("fedrep", "1"),
        ("head_fedavg", "1"),
    ]


def test_a_report_without_server_runs_leaves_no_earlier_seed_means(tmp_path):
    server, out = tmp_path / "server", tmp_path / "rep"
    make_server(server, "fedrep", rounds=2)
    write_runs_report(find_runs([server]), out)
    assert (out / "server_means.md").is_file()
    written = write_runs_report(find_runs([make_decentralized(tmp_path, "sf", epochs=2)]), out)
    assert not list(out.glob("server_means.*")) and out / "runs_table.md" in written


def test_one_seed_twice_in_a_setting_is_named(tmp_path, capsys):
    make_server(tmp_path, "a", rounds=2)
    make_server(tmp_path, "b", rounds=2)
    (group,) = server_seed_groups(find_runs([tmp_path]))
    assert len(group.runs) == 2
    err = capsys.readouterr().err
    assert "2 fedrep runs of one setting share seed 3" in err and str(tmp_path / "b") in err


def test_a_run_that_failed_before_its_first_epoch_is_listed(tmp_path, capsys):
    from fedsheaf.rundir.files import write_failure

    done = make_decentralized(tmp_path, "done", epochs=2)
    early = tmp_path / "early"
    RunDir(early).write_config((done / "config.yaml").read_text())
    write_failure(early, 3, "agent 3: loss became nan in epoch 1, step 1")
    (row,) = [r for r in find_runs([tmp_path]) if r.name == "early"]
    assert (row.records, row.summary) == ([], None)
    assert cli.main(["report", str(early), "--out", str(tmp_path / "rep")]) == 0
    assert "| early | sheaf_frl | 0 | failed | – |" in capsys.readouterr().out


def test_a_run_written_before_a_key_existed_joins_its_setting(tmp_path):
    import yaml

    make_server(tmp_path, "new", rounds=2, seed=3)
    old = make_server(tmp_path, "old", rounds=2, seed=5)
    cfg = yaml.safe_load((old / "config.yaml").read_text())
    del cfg["federated"]["distinct_classes"]  # as config.yaml was written before it existed
    (old / "config.yaml").write_text(yaml.safe_dump(cfg))
    (group,) = server_seed_groups(find_runs([tmp_path]))
    assert (group.setting, group.seeds) == ("–", [3, 5])


def test_a_run_without_a_summary_is_said_to_be_left_out_of_the_means(mixed, tmp_path, capsys):
    """It is in the runs table (status running) but was silently missing from the
    comparison and the server means."""
    root, _ = mixed
    assert cli.main(["report", str(root), "--out", str(tmp_path / "rep")]) == 0
    err = capsys.readouterr().err
    assert (
        "report: note: 1 of the runs found have no summary.json yet (running, stopped, "
        "failed or interrupted: their status is in the runs table) and are left out of the "
        "means and the comparison: sf-b\n"
    ) in err, err
    assert cli.main(["report", str(root / "sf-a"), "--out", str(tmp_path / "rep2")]) == 0
    assert "report: note" not in capsys.readouterr().err
    assert cli.main(["report", str(root / "sf-a"), "--out", str(root / "sf-b")]) == 2
    assert f"--out {root / 'sf-b'} is a run directory" in capsys.readouterr().err
    assert not (root / "sf-b" / "runs_table.md").exists()


def test_the_bytes_axis_says_its_units_and_no_exponent_over_the_title(tmp_path):
    from fedsheaf.ops.report_runs import RunInfo, bytes_figure

    recs = [{"epoch": e, "bytes_sent": 12_000_000 + 1_000_000 * e} for e in (1, 2, 3)]
    run = RunInfo(tmp_path / "sf", {"algorithm": "sheaf_frl"}, recs, None)
    silent = RunInfo(tmp_path / "nc", {"algorithm": "noncoop"}, [{"epoch": 1}], None)
    fig = bytes_figure([run, silent])
    fig.canvas.draw()
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all(label.endswith(" MB") for label in labels), labels
    assert ax.yaxis.get_offset_text().get_text() == ""  # no "1e7" above the axis


def test_more_than_ten_runs_get_colours_of_their_own(tmp_path):
    from fedsheaf.ops.report_runs import RunInfo, learning_curves_figure, run_colours

    assert run_colours(3) == ["C0", "C1", "C2"]
    runs = [
        RunInfo(tmp_path / f"r{i}", {"algorithm": "fedavg"}, [{"round": 1, "acc": 0.1 * i}], None)
        for i in range(12)
    ]
    (ax,) = learning_curves_figure(runs).axes
    colours = {tuple(line.get_color()) for line in ax.lines}
    assert len(ax.lines) == 12 and len(colours) == 12


def test_the_accuracy_after_fine_tuning_is_drawn_apart(tmp_path):
    from fedsheaf.ops.report_runs import RunInfo, learning_curves_figure

    recs = [{"round": t, "acc": 0.5 + 0.1 * t, "loss": 1.0 / t} for t in (1, 2, 3)]
    recs.append({"round": 4, "final": True, "acc": 0.95, "loss": 0.2})
    run = RunInfo(tmp_path / "fedrep", {"algorithm": "fedrep"}, recs, None)
    acc = learning_curves_figure([run]).axes[0]
    stars = [line for line in acc.lines if line.get_marker() == "*"]
    assert len(stars) == 1 and list(stars[0].get_xdata()) == [4]
    assert list(stars[0].get_ydata()) == [0.95]
    rounds = [line for line in acc.lines if line.get_marker() != "*"]
    assert [list(line.get_xdata()) for line in rounds] == [[1, 2, 3]]
    assert "after fine-tuning" in acc.get_title()


def test_runs_whose_folders_share_a_name_are_told_apart(tmp_path):
    make_decentralized(tmp_path / "sweep_a", "quick-seed0", epochs=1)
    make_decentralized(tmp_path / "sweep_b", "quick-seed0", epochs=1)
    make_decentralized(tmp_path / "sweep_b", "other", epochs=1)
    runs = find_runs([tmp_path])
    assert [r.name for r in runs] == ["sweep_a/quick-seed0", "other", "sweep_b/quick-seed0"]
    rows = [line.split(" | ")[0] for line in runs_table_markdown(runs).splitlines()]
    assert "| sweep_a/quick-seed0" in rows and "| sweep_b/quick-seed0" in rows


def test_without_out_the_report_goes_beside_the_runs_never_into_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("a", "b"):
        make_decentralized(tmp_path / "runs", name, epochs=1)
    make_decentralized(tmp_path / "runs" / "study15", "sf-0", epochs=1)
    report = tmp_path / "runs" / "report"
    for paths in (["runs/a", "runs/b"], ["runs/study15"], ["runs/a"], ["runs/a", "runs/study15"]):
        assert cli.main(["report", *paths]) == 0
        printed = capsys.readouterr().out
        assert (report / "runs_table.md").is_file(), paths
        assert "report: wrote " in printed and " files to runs/report\n" in printed
        assert str(Path("runs/report/runs_table.md")) in printed.splitlines()
        assert not [p for p in (tmp_path / "runs").rglob("report") if p != report]
        shutil.rmtree(report)
    # given from elsewhere, absolute: the same folder, named in full
    monkeypatch.chdir(tmp_path / "runs" / "a")
    assert cli.main(["report", str(tmp_path / "runs" / "a"), str(tmp_path / "runs" / "b")]) == 0
    assert f" files to {report}\n" in capsys.readouterr().out
    assert (report / "runs_table.md").is_file()
    assert not (tmp_path / "runs" / "a" / "report").exists()
    # a folder inside a run directory: the report goes beside that run directory
    shutil.rmtree(report)
    monkeypatch.chdir(tmp_path)
    make_decentralized(tmp_path / "runs" / "b" / "extra", "inner", epochs=1)
    assert cli.main(["report", "runs/b/extra"]) == 0
    assert (report / "runs_table.md").is_file()
    assert not (tmp_path / "runs" / "b" / "report").exists()
