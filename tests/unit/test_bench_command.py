"""``fedsheaf bench`` as a command: choosing launches and keeping to a time budget.

The launches here are stand-ins started through ``--launcher`` (a real process group
that sleeps), so the command's own bookkeeping is exercised without MPI or training.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.ops.bench.driver import launch_argv, select
from fedsheaf.ops.bench.plan import plan
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.hostinfo import launch_flags
from tests.conftest import REPO, shared_data_root

LAUNCHER = "srun -n {n}"  # --dry-run resolves no mpiexec with a template


def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedsheaf", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_only_keeps_the_named_launches_in_plan_order():
    launches = plan("full", ["overhead", "speedup"])
    assert [la.label for la in launches] == ["table2", "pair", "twins"]
    assert [la.label for la in select(launches, "pair")] == ["pair"]
    assert [la.label for la in select(launches, " pair,table2 ")] == ["table2", "pair"]
    assert select(launches, None) == launches
    with pytest.raises(ConfigError, match=r"no launch \['scaling'\].*planned: table2, pair, twins"):
        select(launches, "pair,scaling")


def test_only_on_the_command_line():
    out = bench("overhead", "--size", "full", "--only", "pair", "--dry-run")
    assert out.returncode == 0, out.stderr
    headings = [ln for ln in out.stdout.splitlines() if not ln.startswith((" ", "fedsheaf"))]
    assert [line.split(" ")[0] for line in headings] == ["pair"]
    bad = bench("overhead", "--only", "nope", "--dry-run")
    assert bad.returncode != 0
    assert "--only: no launch ['nope']" in bad.stderr
    assert "Traceback" not in bad.stderr
    bad = bench("overhead", "--budget", "0", "--dry-run")
    assert bad.returncode != 0 and "--budget must be a positive number" in bad.stderr


@pytest.mark.parametrize(
    ("args", "tag"),
    [
        ([], "small-cpu"),
        (["overhead", "bytes", "speedup", "scaling", "clients", "pilot_cost"], "small-cpu"),
        (["overhead", "bytes"], "small-cpu-overhead+bytes"),
        (["overhead", "--only", "pair"], "small-cpu-pair"),
        (["scaling", "--set", "sheaf.overlap_exchange=true"], "small-cpu-scaling-set"),
        (["overhead", "--tag", "mine"], "mine"),
    ],
)
def test_a_partial_run_does_not_take_the_whole_suites_results_file(args, tag):
    """Run with the default --out, `fedsheaf bench overhead` replaced the committed
    results/bench/small-cpu.json with its part of the suite."""
    out = bench(*args, "--device", "cpu", "--launcher", LAUNCHER, "--dry-run")
    assert out.returncode == 0, out.stderr
    said = f"fedsheaf bench: results would go to {Path('results/bench') / tag}.json and .md"
    assert said in out.stdout.splitlines(), out.stdout


def test_budget_stops_the_running_launch_skips_the_rest_and_writes_the_summary(tmp_path):
    sleeper = "bash -c 'sleep 300' {n}"  # argv after the template: python -m worker ...
    out = bench(
        "overhead",
        "bytes",
        "--launcher",
        sleeper,
        "--budget",
        "3",
        "--out",
        str(tmp_path),
        "--tag",
        "cut",
        timeout=200,
    )
    assert out.returncode == 1, out.stdout + out.stderr  # not 124: the command ran out
    doc = json.loads((tmp_path / "cut.json").read_text())
    first, *rest = doc["launches"]
    # stopped at its time limit (124), not left to its 300 s sleep (a timeout above)
    assert first["returncode"] == 124
    assert rest and all(r["skipped"] == "--budget spent" for r in rest)
    assert doc["results"] == {}
    assert any("stopped or skipped for time" in n for n in doc["meta"]["notes"])
    md = (tmp_path / "cut.md").read_text()
    assert f"{first['label']}: stopped at its time limit" in md
    assert f"{rest[0]['label']}: skipped (--budget spent)" in md
    assert "skipped, --budget spent" in out.stdout


def test_render_of_a_missing_or_non_json_file_is_one_error_line(tmp_path, capsys):
    bad = tmp_path / "notes.json"
    bad.write_text("not json\n")
    other = tmp_path / "list.json"
    other.write_text("[1, 2]\n")
    for path, words in (
        (tmp_path / "missing.json", "results file"),
        (bad, "is not valid JSON"),
        (other, "is not a fedsheaf bench results file"),
    ):
        assert cli.main(["bench", "--render", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("fedsheaf: error: --render: ") and str(path) in err, err
        assert words in err and err.count("\n") == 1
    assert not (tmp_path / "notes.md").exists()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"meta": {}, "launches": [], "results": 5}', "its results are not an object"),
        ("[1, 2]", "it holds a JSON list, not an object"),
        ('{"meta": {}}', "it lacks launches and results"),
        ('{"meta": [], "launches": [], "results": {}}', "its meta is not an object"),
        ('{"meta": {}, "launches": [1], "results": {}}', "its launches are not a list of"),
        ('{"meta": {}, "launches": [], "results": {"bytes": {}}}', "its bytes results are not"),
        (
            '{"meta": {}, "launches": [], "results": {"overhead": [{"label": "x"}]}}',
            "its overhead results lack key 'ratio'",
        ),
        (
            '{"meta": {}, "launches": [], "results": {"clients": [5]}}',
            "its clients results are malformed (",
        ),
        ('{"meta": {"notes": 5}, "launches": [], "results": {}}', "its meta or launches are"),
        ("[" * 100_000, "is not valid JSON"),
    ],
)
def test_render_of_a_file_that_is_not_a_results_file_is_one_error_line(
    tmp_path, capsys, text, words
):
    path = tmp_path / "r.json"
    path.write_text(text)
    assert cli.main(["bench", "--render", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedsheaf: error: --render: {path} ") and err.count("\n") == 1, err
    assert words in err, err
    assert path.read_text() == text and sorted(tmp_path.iterdir()) == [path]


def test_render_of_a_file_that_is_not_utf8_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_bytes(b'{"meta": "\xff"}')
    assert cli.main(["bench", "--render", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedsheaf: error: --render: cannot read results file {path}: ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("tag", ["../x", "a/b", "..", ".", "t" * 251])  # 251 + .json > 255
def test_a_tag_that_is_not_a_plain_name_is_refused(tmp_path, capsys, tag):
    out = tmp_path / "bench" / "out"
    harmless = "true {n}"  # were a launch started, it would end at once
    argv = ["bench", "overhead", "--launcher", harmless, "--out", str(out), "--tag", tag]
    assert cli.main([*argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedsheaf: error: --tag {tag!r} must be a plain name"), err
    assert err.count("\n") == 1
    assert cli.main(argv) == 2  # refused before any launch
    assert list(tmp_path.iterdir()) == []


def test_render_rewrites_the_markdown_of_a_results_file(tmp_path, capsys):
    doc = {"meta": {"tag": "t", "size": "small", "device": "cpu"}, "launches": [], "results": {}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["bench", "--render", str(path)]) == 0
    assert (tmp_path / "t.md").is_file()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--repeats", "0"),
        ("--repeats", "two"),
        ("--timeout", "-1"),
        ("--timeout", "0"),
        ("--launcher", "srun -n"),
        ("--launcher", "srun -n '{n}"),
        ("--dataset", "cifar10"),
    ],
)
def test_bad_option_values_are_rejected(option, value, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "overhead", "--dry-run", option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {option}:" in err and "Traceback" not in err


def test_plan_rejects_zero_repeats_and_datasets_other_than_28x28():
    assert plan("small", ["overhead"], repeats=1)[0].spec["repeats"] == 1
    with pytest.raises(ConfigError, match="repeats must be a positive integer"):
        plan("small", ["overhead"], repeats=0)
    with pytest.raises(ConfigError, match="dataset must be one of fashionmnist, mnist"):
        plan("small", ["overhead"], dataset="cifar10")


def test_plan_keeps_fedrep_when_only_the_chosen_dataset_is_missing():
    assert plan("small", ["clients"], image_data=False) == []
    kept = plan("small", ["clients"], dataset="mnist", image_data=False, fedrep_data=True)
    assert kept and all(la.cases == ["clients"] for la in kept)


def test_dry_run_lists_readable_launches(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    argv = ["bench", "overhead", "--dry-run", "--repeats", "2", "--launcher", LAUNCHER]
    root = shared_data_root()  # the FashionMNIST copy, where this machine has one
    if root is not None:
        argv += ["--data-root", str(root)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "{'label'" not in out
    lines = [ln for ln in out.splitlines() if not ln.startswith("fedsheaf bench: note:")]
    dataset = "fashionmnist" if root is not None else "digits"
    assert lines[0] == "pair (2 ranks): overhead"
    assert lines[1].startswith("    $ srun -n 2 ") and "-m fedsheaf.ops.bench.worker" in lines[1]
    assert lines[2].startswith(f"    spec: configs/pair.yaml data.dataset={dataset}")
    assert "repeats=2" in lines[2]


def test_a_requested_case_skipped_for_missing_data_is_reported(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    empty = str(tmp_path)
    argv = ["bench", "clients", "--data-root", empty, "--launcher", LAUNCHER]
    assert cli.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fedsheaf bench: note: case clients skipped: the FedRep case needs")
    assert empty in out and out.count("\n") == 1  # nothing else: no launch
    # a real run has nothing left to run: it says why (and runs nothing)
    assert cli.main([*argv, "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert "note: case clients skipped" in captured.out
    assert "fedsheaf: error: nothing to run: case clients skipped" in captured.err
    assert not (tmp_path / "out").exists()
    # the decentralized cases fall back to the bundled digits, and say so
    assert cli.main(["bench", "overhead", "--data-root", empty, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "note: fashionmnist not found under" in out and "data.dataset=digits" in out
    # ... but a data set asked for by name is not replaced
    for dataset in ("fashionmnist", "mnist"):
        argv = ["bench", "overhead", "--dataset", dataset, "--data-root", empty, "--dry-run"]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"fedsheaf: error: --dataset {dataset}: not found under {empty} (no ")


def test_help_describes_the_command_and_its_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Run the performance benchmarks" in out
    assert "(default: 5 at --size small, 7 at full)" in out


def test_dry_run_without_any_mpiexec_still_lists_the_launches(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("FEDSHEAF_MPIEXEC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpiexec on PATH
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # none beside Python
    assert cli.main(["bench", "overhead", "--only", "pair,quickstart", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "note: no mpiexec found here" in out
    for n in (2, 4):  # with the flags a real launch would get on this machine
        assert f"    $ {shlex.join(['mpiexec', *launch_flags(n)[0], '-n', str(n)])} " in out
    with pytest.raises(ConfigError, match="no mpiexec found"):  # a real run needs one
        launch_argv(plan("small", ["overhead"])[0], None, tmp_path / "s", tmp_path / "o")


def _flaky_launcher(tmp_path: Path, first: str, later: str) -> tuple[Path, Path]:
    """A launcher script that prints ``first`` and exits 213 on its first call, then
    prints ``later`` and exits 3; it counts its calls in a file."""
    calls = tmp_path / "calls"
    launcher = tmp_path / "flaky.sh"
    launcher.write_text(
        "#!/usr/bin/env bash\n"
        f'echo x >> "{calls}"\n'
        f'if [ "$(wc -l < "{calls}")" -eq 1 ]; then echo {shlex.quote(first)}; exit 213; fi\n'
        f"echo {shlex.quote(later)}; exit 3\n"
    )
    launcher.chmod(0o755)
    return launcher, calls


def _flaky_bench(tmp_path: Path, launcher: Path) -> subprocess.CompletedProcess[str]:
    return bench(
        "overhead", "--only", "pair", "--launcher", f"{launcher} {{n}}",
        "--out", str(tmp_path / "out"), "--tag", "flaky",
    )  # fmt: skip


def test_a_launch_that_mpiexec_failed_to_start_is_retried_once(tmp_path):
    """Open MPI sporadically fails to start a job ("PMIx server's listener thread failed to
    start"); the launch is started once more."""
    launcher, calls = _flaky_launcher(
        tmp_path,
        "The PMIx server's listener thread failed to start. We cannot continue.",
        "fedsheaf bench: pair: overhead on 2 ranks",
    )
    out = _flaky_bench(tmp_path, launcher)
    assert out.returncode == 1, out.stdout + out.stderr
    assert len(calls.read_text().splitlines()) == 2  # one retry, not more
    assert "exit 213: mpiexec failed to start the job" in out.stdout
    assert "retrying once" in out.stdout and "exit 3, see" in out.stdout
    doc = json.loads((tmp_path / "out/flaky.json").read_text())
    (launch,) = doc["launches"]
    assert launch["returncode"] == 3 and launch["retried_after"]["returncode"] == 213
    failed_log = Path(launch["retried_after"]["log"])
    assert "listener thread failed" in failed_log.read_text()
    assert "overhead on 2 ranks" in Path(launch["log"]).read_text()
    md = (tmp_path / "out/flaky.md").read_text()
    assert "## Launches started twice" in md and "exit 213 as mpiexec failed" in md


@pytest.mark.parametrize(
    "first",
    [
        "fedsheaf bench: pair: overhead on 2 ranks",  # the ranks started, then failed
        "Traceback (most recent call last): ImportError",  # not a launcher hiccup
    ],
)
def test_other_failures_are_not_retried(tmp_path, first):
    launcher, calls = _flaky_launcher(tmp_path, first, "fedsheaf bench: pair: overhead")
    out = _flaky_bench(tmp_path, launcher)
    assert out.returncode == 1, out.stdout + out.stderr
    assert len(calls.read_text().splitlines()) == 1 and "retrying" not in out.stdout
    doc = json.loads((tmp_path / "out/flaky.json").read_text())
    assert doc["launches"][0]["returncode"] == 213 and "retried_after" not in doc["launches"][0]


def test_set_adds_overrides_to_every_launch_and_checks_them_first(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    argv = ["bench", "overhead", "scaling", "--dry-run", "--launcher", LAUNCHER]
    assert cli.main([*argv, "--set", "sheaf.overlap_exchange=true", "--set", "seed=3"]) == 0
    specs = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("    spec:")]
    assert len(specs) == len(plan("small", ["overhead", "scaling"]))
    assert all(
        ln.endswith("sheaf.overlap_exchange=true seed=3") or " seed=3 " in ln for ln in specs
    )
    assert all("sheaf.overlap_exchange=true seed=3" in ln for ln in specs)
    assert cli.main([*argv, "--set", "sheaf.overlap=true"]) == 2
    err = capsys.readouterr().err
    assert err.count("fedsheaf: error: --set, launch pair:") == 1 and "overlap_exchange" in err
    assert "Traceback" not in err


def test_pilot_batches_add_a_sheaf_frl_method_per_k_to_the_overhead_launches(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    argv = ["bench", "overhead", "bytes", "--dry-run", "--launcher", LAUNCHER]
    assert cli.main([*argv, "--pilot-batches", "16,2"]) == 0
    out = capsys.readouterr().out.splitlines()
    heads = [i for i, ln in enumerate(out) if " rank" in ln and not ln.startswith(" ")]
    for i in heads:
        spec = out[i + 2]
        timed = "overhead" in out[i]
        assert (
            '"sheaf_frl_K=16": ["algorithm=sheaf_frl", "sheaf.pilot_batch=16"]' in spec
        ) == timed
        assert ('"sheaf_frl_K=2": ["algorithm=sheaf_frl", "sheaf.pilot_batch=2"]' in spec) == timed
    assert any("overhead" in out[i] for i in heads) and not all("overhead" in out[i] for i in heads)
    assert cli.main([*argv, "--pilot-batches", "0"]) == 2
    assert "--pilot-batches must be positive integers" in capsys.readouterr().err


def test_a_pilot_batch_larger_than_the_pilot_set_is_refused_before_timing():
    """The quickstart's pilot set holds 180 digits: K = 512 would be timed as K = 180."""
    from fedsheaf.ops.bench.decentralized import check_pilot_batches
    from tests.unit.test_bench_timer_loop import build

    runs = [("sheaf_frl", 32, "uniform"), ("sheaf_frl_K=180", 180, "uniform")]
    runs += [("sheaf_frl_K=512", 512, "uniform"), ("sheaf_frl_K=16", 16, "prototype")]
    algos = {
        name: build("sheaf_frl", f"sheaf.pilot_batch={k}", f"sheaf.pilot_strategy={strategy}")
        for name, k, strategy in runs
    }
    cfgs = {name: algo.cfg for name, algo in algos.items()}
    assert len(algos["sheaf_frl"].agent.data.x_pilot) == 180
    fits = ["sheaf_frl", "sheaf_frl_K=180"]
    check_pilot_batches({n: cfgs[n] for n in fits}, {n: algos[n] for n in fits})
    for bad, says in (
        ("sheaf_frl_K=512", "K = 512 pilots per step, but the shared pilot set holds 180"),
        ("sheaf_frl_K=16", "pilot_strategy=prototype encodes one pilot column per class"),
    ):
        with pytest.raises(ConfigError, match=f"method {bad}: .*{says}"):
            check_pilot_batches({bad: cfgs[bad]}, {bad: algos[bad]})


def test_pilot_batches_need_an_overhead_launch_and_are_not_timed_twice(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    argv = ["bench", "--dry-run", "--launcher", LAUNCHER, "--pilot-batches"]
    assert cli.main(["bench", "scaling", "--dry-run", "--pilot-batches", "4"]) == 2
    assert "--pilot-batches needs the overhead case" in capsys.readouterr().err
    assert cli.main(["bench", "overhead", "--only", "pair", *argv[1:], ""]) == 2
    assert "--pilot-batches must be positive integers" in capsys.readouterr().err
    assert cli.main(["bench", "overhead", "--only", "pair", *argv[1:], "64,16,8"]) == 0
    out = capsys.readouterr().out
    # the config's K and the K/8 method's are timed already
    assert "fedsheaf bench: note: --pilot-batches: pair times K = 8, 64 already" in out
    assert '"sheaf_frl_K=16"' in out and "sheaf_frl_K=8" not in out and "K=64" not in out


def test_results_name_the_commit_of_the_code_that_made_them(tmp_path):
    from fedsheaf.ops.bench.driver import source_commit

    assert source_commit(tmp_path) is None  # not a git checkout (an installed copy)
    repo = tmp_path / "checkout"
    repo.mkdir()

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    git("init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-q", "-m", "a")
    head = git("rev-parse", "HEAD")
    assert source_commit(repo) == head
    (repo / "new.json").write_text("{}")  # results written beside the code: not a change
    assert source_commit(repo) == head
    (repo / "a.py").write_text("x = 2\n")
    assert source_commit(repo) == head + "+changes"
    assert source_commit(repo / "sub") is None  # (a folder inside, not the checkout)
