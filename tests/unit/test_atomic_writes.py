"""Figures, tables and graph files are written atomically (temp file + fsync + os.replace)."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import stat
from pathlib import Path
from types import ModuleType

import matplotlib

matplotlib.use("Agg")
import matplotlib.image
import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from fedsheaf.graphs import Graph, load_graph, save_graph
from fedsheaf.ops.report import Row, plot
from fedsheaf.util.atomic import save_figure

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _leftovers(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.tmp"))


def _broken_savefig(self: Figure, fname: object, *args: object, **kwargs: object) -> None:
    """A savefig that writes half a file and then fails (a full disk, a kill)."""
    if hasattr(fname, "write"):
        fname.write(b"partial")
    else:
        Path(fname).write_bytes(b"partial")
    raise OSError("disk full")


def test_save_figure_writes_a_readable_png_and_closes_the_figure(tmp_path: Path) -> None:
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, tmp_path / "sub" / "fig.png", dpi=50)
    assert path == tmp_path / "sub" / "fig.png"
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert matplotlib.image.imread(path).shape[:2] == (100, 150)
    assert not plt.fignum_exists(fig.number)
    assert not _leftovers(path.parent)


def test_save_figure_format_follows_the_suffix(tmp_path: Path) -> None:
    fig, _ = plt.subplots()
    save_figure(fig, tmp_path / "fig.pdf")
    assert (tmp_path / "fig.pdf").read_bytes()[:5] == b"%PDF-"
    fig, _ = plt.subplots()
    save_figure(fig, tmp_path / "keep.png", close=False)
    assert plt.fignum_exists(fig.number)
    plt.close(fig)


def test_save_figure_failure_keeps_the_old_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "fig.png"
    path.write_bytes(b"old")
    monkeypatch.setattr(Figure, "savefig", _broken_savefig)
    fig, _ = plt.subplots()
    with pytest.raises(OSError, match="disk full"):
        save_figure(fig, path)
    assert path.read_bytes() == b"old"
    assert not _leftovers(tmp_path)
    assert not plt.fignum_exists(fig.number)


def _rows() -> list[Row]:
    acc = {"private_acc": 0.8, "comm_acc": 0.5, "comm_acc_deg": 0.55}
    std = {k: 0.01 for k in acc}
    return [Row("sheaf_frl", s, None, (), 3, 0.7, dict(acc), dict(std), 1) for s in (0.6, 1.0)]


def test_report_plot_is_atomic(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "accuracy_vs_shift.png"
    assert plot(_rows(), "shift", path) == path
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert not _leftovers(tmp_path)
    before = path.read_bytes()
    monkeypatch.setattr(Figure, "savefig", _broken_savefig)
    with pytest.raises(OSError, match="disk full"):
        plot(_rows(), "shift", path)
    assert path.read_bytes() == before  # a failed rewrite leaves the previous figure
    assert not _leftovers(tmp_path)


def test_save_graph_round_trips_with_fsync_and_umask_mode(tmp_path: Path, monkeypatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    g = Graph(name="tri", dims=(4, 8, 8), edges=((0, 1), (1, 2), (0, 2)))
    path = tmp_path / "graphs" / "tri.yaml"
    save_graph(g, path, comment="a triangle")
    # the data reach the disk before the new name points at them
    assert "replace" in events and "fsync" in events[: events.index("replace")], events
    assert load_graph(path) == g
    assert path.read_text(encoding="utf-8").startswith("# a triangle\n")
    assert not _leftovers(path.parent)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600

    save_graph(Graph(name="pair", dims=(4, 4), edges=((0, 1),)), path)  # overwrite
    assert load_graph(path).name == "pair"
    assert not _leftovers(path.parent)


def _script(relpath: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(Path(relpath).stem, REPO / relpath)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fedrep_make_table_writes_atomically(tmp_path: Path, capsys) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    for alg in ("fedrep", "local"):
        d = runs / alg
        d.mkdir(parents=True)
        summary = {
            "algorithm": alg,
            "score": 0.8,
            "acc_last": 0.8,
            "final_acc": None,
            "client_acc": [0.7, 0.9],
            "shared_params": 10,
            "bytes_up_total": 2e6,
            "bytes_down_total": 3e6,
            "wall_seconds": 12.0,
            "rounds": 3,
            "score_rounds": [2, 3],
        }
        (d / "summary.json").write_text(json.dumps(summary))
        metrics = [{"round": r, "final": False, "acc": 0.5 + 0.1 * r} for r in (1, 2, 3)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    out.mkdir()
    _script("results/fedrep/make_table.py").main(runs, out)
    raw = (out / "table.csv").read_bytes()
    assert raw.endswith(b"\r\n")  # csv's own line ends, as before
    rows = list(csv.DictReader(io.StringIO(raw.decode())))
    assert [r["algorithm"] for r in rows] == ["FedRep", "Local"] and rows[0]["MB_up"] == "2"
    assert "| FedRep | **80.00** |" in (out / "table.md").read_text(encoding="utf-8")
    assert (out / "accuracy.png").read_bytes()[:8] == PNG_MAGIC
    assert not _leftovers(out)
    assert "| FedRep |" in capsys.readouterr().out


def test_head_fedavg_make_results_writes_atomically(tmp_path: Path, capsys) -> None:
    (tmp_path / "ufm").mkdir()
    assert _script("results/head_fedavg/make_results.py").main(str(tmp_path)) == 0
    assert (tmp_path / "ufm_table.md").read_text(encoding="utf-8").startswith("| mode |")
    assert not (tmp_path / "table.md").exists()  # no runs, no run table
    assert not _leftovers(tmp_path)
    assert "final err to G_cen" in capsys.readouterr().out


def test_the_first_rank_to_fail_reports_and_an_older_launchs_note_is_replaced(tmp_path):
    import json
    import os
    import time

    from fedsheaf.rundir.files import FAILURE_FILE, write_failure

    started = time.time() - 1
    assert write_failure(tmp_path, 2, "agent 2: loss became nan", since=started)
    assert not write_failure(tmp_path, 0, "agent 0: loss became nan", since=started)
    note = json.loads((tmp_path / FAILURE_FILE).read_text())
    assert (note["rank"], note["error"]) == (2, "agent 2: loss became nan")
    # the note of an earlier launch (older than this one's start) is not this job's
    os.utime(tmp_path / FAILURE_FILE, (started - 60, started - 60))
    assert write_failure(tmp_path, 1, "client 4: loss became nan", since=started)
    assert json.loads((tmp_path / FAILURE_FILE).read_text())["rank"] == 1
    assert write_failure(tmp_path, 3, "without since: every rank writes and reports")
    assert sorted(p.name for p in tmp_path.iterdir()) == [FAILURE_FILE]  # no temp files
    assert write_failure(tmp_path / "unseen", 0, "x", since=started)  # reports, writes nothing
    assert not (tmp_path / "unseen").exists()


def test_without_hard_links_every_failing_rank_writes_and_reports(tmp_path, monkeypatch):
    import json
    import os
    import time

    from fedsheaf.rundir.files import FAILURE_FILE, write_failure

    def no_links(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)  # some FUSE and SMB mounts
    assert write_failure(tmp_path, 1, "first", since=time.time() - 1)
    assert write_failure(tmp_path, 2, "second", since=time.time() - 1)
    assert json.loads((tmp_path / FAILURE_FILE).read_text())["error"] == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == [FAILURE_FILE]


def test_a_name_near_the_length_limit_is_written(tmp_path):
    from fedsheaf.util.atomic import atomic_write_text

    name = "t" * 250 + ".json"  # 255 bytes, as a --tag of 250 gives
    assert atomic_write_text(tmp_path / name, "{}").read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == [name]
