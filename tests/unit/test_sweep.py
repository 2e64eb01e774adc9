"""`fedsheaf sweep`: expanding a study into runs (count, content, presets, errors)."""

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from fedsheaf.cli import main as cli
from fedsheaf.config.sections import load_config
from fedsheaf.graphs import load_graph
from fedsheaf.ops.study import expand, write_manifest
from fedsheaf.ops.sweep import after_interrupt, emit, launch_retrying, restart_overrides
from fedsheaf.util.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _study(tmp_path: Path, **extra) -> Path:
    raw = {
        "study": "s15",
        "config": str(REPO / "configs/mnist15.yaml"),
        "output": str(tmp_path / "out"),
        "seeds": [0, 1],
        "set": {"train.epochs": 3, "data.dataset": "fashionmnist"},
        "axis": {"name": "s", "key": "data.shift", "values": [0.0, 0.6, 1.0]},
        "methods": [
            {
                "name": "sheaf_frl",
                "set": {"algorithm": "sheaf_frl"},
                "grid": {"sheaf.lam": [1e-5, 1e-2, 1.0]},
            },
            {"name": "noncoop", "set": {"algorithm": "noncoop"}},
        ],
    }
    raw.update(extra)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_expansion_is_method_by_value_by_grid_by_seed(tmp_path):
    study = expand(_study(tmp_path))
    runs = study.runs
    assert len(runs) == 3 * (3 + 1) * 2  # shifts x (λ grid + noncoop) x seeds
    assert len({r.name for r in runs}) == len(runs)
    assert {r.ranks for r in runs} == {15}
    sheaf = [r for r in runs if r.method == "sheaf_frl"]
    assert sorted({(r.value, r.grid["sheaf.lam"], r.seed) for r in sheaf}) == sorted(
        (s, lam, seed) for s in (0.0, 0.6, 1.0) for lam in (1e-5, 1e-2, 1.0) for seed in (0, 1)
    )
    assert all(r.grid == {} for r in runs if r.method == "noncoop")
    assert study.axis == "s" and study.grid_keys == ["sheaf.lam"]

    one = next(r for r in sheaf if r.value == 0.6 and r.grid["sheaf.lam"] == 1e-5 and r.seed == 1)
    assert one.name == "sheaf_frl-s0.6-lam1e-05-seed1"
    cfg = load_config(one.config, one.overrides)  # the overrides build the intended run
    assert cfg.algorithm == "sheaf_frl" and cfg.data.shift == 0.6 and cfg.sheaf.lam == 1e-5
    assert cfg.seed == 1 and cfg.train.epochs == 3 and cfg.data.dataset == "fashionmnist"
    assert Path(cfg.output.dir) / cfg.output.name == Path(one.dir)

    argv = one.argv(["mpiexec", "-n", "{n}"], ["fedsheaf"])
    assert argv[:5] == ["mpiexec", "-n", "15", "fedsheaf", "run"]


def test_table3_preset_writes_one_pair_graph_and_config_per_d(tmp_path):
    path = _study(
        tmp_path,
        config=str(REPO / "configs/pair.yaml"),
        axis={"name": "d", "preset": "table3", "values": [16, 512]},
        methods=[
            {"name": "fedproto", "set": {"algorithm": "fedproto"}},
            {"name": "sheaf_frl", "grid": {"sheaf.lam": [0.1]}},
        ],
        set=None,
        seeds=[0],
    )
    study = expand(path)
    assert len(study.runs) == 4
    for run in study.runs:
        cfg = load_config(run.config, run.overrides)
        graph = load_graph(cfg.graph)
        assert graph.dims == (run.value, run.value) and graph.edges == ((0, 1),)
        assert [a.dim for a in cfg.agents] == [run.value, run.value]
        assert run.ranks == (3 if run.method == "fedproto" else 2)  # + the server rank
    d512 = load_config(tmp_path / "out/configs/pair-d512.yaml")
    assert d512.agents[0].encoder == [64, 128, 256, 512] and d512.agents[1].head == [128, 64]


def test_the_printed_plan_of_a_preset_study_writes_nothing(tmp_path, capsys):
    path = _study(
        tmp_path,
        config=str(REPO / "configs/pair.yaml"),
        axis={"name": "d", "preset": "table3", "values": [16, 512]},
        methods=[{"name": "sheaf_frl"}],
        set=None,
        seeds=[0],
    )
    assert cli.main(["sweep", str(path)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("mpiexec")]
    assert len(lines) == 2 and all(str(tmp_path / "out/configs/pair-d") in ln for ln in lines)
    assert not (tmp_path / "out").exists()
    planned = expand(path, write=False)
    assert [r.config for r in planned.runs] == [r.config for r in expand(path).runs]
    assert (tmp_path / "out/configs/pair-d16.yaml").is_file()  # written when the runs are made
    with pytest.raises(ConfigError, match="outside Table 3|Table 3"):
        expand(
            _study(tmp_path, axis={"name": "d", "preset": "table3", "values": [17]}), write=False
        )


def test_a_method_that_cannot_handle_the_setup_fails_at_expansion(tmp_path):
    path = _study(tmp_path, methods=[{"name": "fedproto", "set": {"algorithm": "fedproto"}}])
    with pytest.raises(ConfigError, match="fedproto.*same latent dimension"):
        expand(path)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"sede": [1]}, "unknown key"),
        ({"axis": {"name": "s", "values": [0.1]}}, "exactly one of 'key' or 'preset'"),
        ({"axis": {"preset": "table9", "values": [16]}}, "unknown axis preset"),
        ({"methods": []}, "non-empty list"),
        ({"methods": [{"name": "x", "grid": {"sheaf.lam": [-1.0]}}]}, "sheaf.lam"),
    ],
)
def test_bad_studies_raise_config_errors(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        expand(_study(tmp_path, **change))


def test_emit_and_manifest(tmp_path):
    study = expand(_study(tmp_path, seeds=[0]))
    manifest = json.loads(write_manifest(study).read_text())
    assert manifest["axis"] == "s" and len(manifest["runs"]) == len(study.runs) == 12
    (group,) = emit(study, tmp_path / "cmds.txt", "srun -n {n}")  # every run: 15 tasks
    assert (group.path, group.tasks, group.gpus) == (tmp_path / "cmds.txt", 15, 0)
    lines = group.path.read_text().splitlines()
    assert len(lines) == 12
    first = shlex.split(lines[0])
    assert first[:5] == ["srun", "-n", "15", "fedsheaf", "run"]
    assert f"output.name={study.runs[0].name}" in first
    assert all(shlex.split(ln)[-1] == "checkpoint.resume=true" for ln in lines)  # rerunnable


def test_cli_dry_run_prints_the_plan(tmp_path, capsys):
    assert cli.main(["sweep", str(_study(tmp_path, seeds=[0]))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if line.startswith("mpiexec -n 15 fedsheaf run")]) == 12
    assert out[-1].startswith("# 12 runs")
    assert cli.main(["sweep", str(_study(tmp_path, seeds=[0])), "--emit"]) == 0
    assert len((tmp_path / "out/commands.txt").read_text().splitlines()) == 12
    assert cli.main(["sweep", str(tmp_path / "missing.yaml")]) == 2


def test_local_runs_skip_finished_and_resume_interrupted(tmp_path):
    runs = expand(_study(tmp_path, seeds=[0])).runs
    sheaf = next(r for r in runs if r.method == "sheaf_frl")
    assert restart_overrides(sheaf, force=False) == []  # never started
    assert "it had not started" in after_interrupt(sheaf)
    Path(sheaf.dir).mkdir(parents=True)
    (Path(sheaf.dir) / "metrics.jsonl").write_text("{}\n")
    assert restart_overrides(sheaf, force=False) == ["checkpoint.resume=true"]
    assert "resumes from its last checkpoint" in after_interrupt(sheaf)
    (Path(sheaf.dir) / "summary.json").write_text("{}")
    assert restart_overrides(sheaf, force=False) is None
    assert after_interrupt(sheaf).startswith("it had finished")  # a signal after its end
    assert restart_overrides(sheaf, force=True) == ["output.overwrite=true"]
    hub = expand(
        _study(
            tmp_path,
            config=str(REPO / "configs/pair.yaml"),
            axis={"name": "d", "preset": "table3", "values": [16]},
            methods=[{"name": "fedmuscle", "set": {"algorithm": "fedmuscle"}}],
            set=None,
            seeds=[0],
        )
    ).runs[0]
    Path(hub.dir).mkdir(parents=True)
    assert restart_overrides(hub, force=False) == ["checkpoint.resume=true"]


def test_local_launcher_honours_fedsheaf_mpiexec(monkeypatch, tmp_path):
    from fedsheaf.util.hostinfo import local_launcher

    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("FEDSHEAF_MPIEXEC", str(fake))
    cmd, env = local_launcher(10_000)
    assert cmd[0] == str(fake) and "--oversubscribe" in cmd
    assert cmd[-2:] == ["-n", "{n}"] and env["FEDSHEAF_THREADS"] == "1"
    monkeypatch.setenv("FEDSHEAF_MPIEXEC", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="FEDSHEAF_MPIEXEC=.*missing is not an executable"):
        local_launcher(1)


def test_timings_merge_across_invocations(tmp_path, capsys):
    from fedsheaf.ops.sweep import record_timings

    path = tmp_path / "timings.json"
    record_timings(path, {"a": 10.0, "b": 20.0}, 31.0)
    record_timings(path, {"c": 5.5}, 6.0)  # a second --local run skipped a and b
    record_timings(path, {"b": 21.0}, 22.0)  # b forced again: its newer time wins
    got = json.loads(path.read_text())
    assert got == {
        "total_seconds": 36.5,
        "last_invocation_seconds": 22.0,
        "runs": {"a": 10.0, "b": 21.0, "c": 5.5},
    }
    path.write_text("[1, 2]")
    record_timings(path, {"d": 1.0}, 1.0)
    assert json.loads(path.read_text())["runs"] == {"d": 1.0}
    assert "not a timings file" in capsys.readouterr().out


def test_options_that_do_not_apply_are_errors(tmp_path, capsys):
    study, target = str(_study(tmp_path, seeds=[0])), str(tmp_path / "x.txt")
    for argv, words in (
        (["--force"], "option --force applies only to --local"),
        (["--emit", target, "--force"], "option --force applies only to --local"),
        (["--launcher", "srun -n {n}"], "option --launcher applies only to --emit"),
        (["--local", "--launcher", "srun -n {n}"], "option --launcher applies only to --emit"),
    ):
        assert cli.main(["sweep", study, *argv]) == 2
        assert f"fedsheaf: error: {words}" in capsys.readouterr().err
    assert not (tmp_path / "x.txt").exists()


def test_a_missing_or_broken_study_file_is_called_a_study_file(tmp_path, capsys):
    assert cli.main(["sweep", str(tmp_path / "missing.yaml")]) == 2
    assert f"study file {tmp_path / 'missing.yaml'} does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("study: [\n")
    assert cli.main(["sweep", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"error: study file {bad} is not valid YAML: line 2" in err and "config file" not in err


def test_emit_with_an_unusable_launcher_is_an_error(tmp_path, capsys):
    study = expand(_study(tmp_path, seeds=[0]))
    with pytest.raises(ConfigError, match='^--launcher: cannot split "srun -n \'{n}" into words'):
        emit(study, tmp_path / "cmds.txt", "srun -n '{n}")
    with pytest.raises(ConfigError, match="^--launcher: 'srun -n' has no {n} for the rank count"):
        emit(study, tmp_path / "cmds.txt", "srun -n")
    assert not (tmp_path / "cmds.txt").exists()
    # on the command line, as bench says it
    for command in (["sweep", str(_study(tmp_path, seeds=[0])), "--emit"], ["bench", "--dry-run"]):
        with pytest.raises(SystemExit) as exc:
            cli.main([*command, "--launcher", "srun -n"])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "argument --launcher: 'srun -n' has no {n} for the rank count" in err


def test_emit_replaces_only_a_command_list(tmp_path, capsys):
    study_file = _study(tmp_path, seeds=[0])
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    cmds = tmp_path / "cmds.txt"
    (tmp_path / "commands.txt").mkdir()  # a folder: its commands.txt
    for target in (study_file, notes, tmp_path):  # the study itself, any other file, a folder
        before = target.read_bytes() if target.is_file() else None
        assert cli.main(["sweep", str(study_file), "--emit", str(target)]) == 2
        err = capsys.readouterr().err
        named = target / "commands.txt" if target.is_dir() else target
        assert f"fedsheaf: error: --emit {named}: " in err
        assert before is None or target.read_bytes() == before
    assert not (tmp_path / "out" / "study.json").exists()  # refused before anything is written
    assert cli.main(["sweep", str(study_file), "--emit", str(notes / "cmds.txt")]) == 2
    err = capsys.readouterr().err
    assert f"--emit {notes / 'cmds.txt'}: {notes} is a file, not a directory" in err
    assert not (tmp_path / "out" / "study.json").exists()
    assert cli.main(["sweep", str(study_file), "--emit", str(cmds)]) == 0
    first = cmds.read_text()
    assert (
        cli.main(["sweep", str(study_file), "--emit", str(cmds), "--launcher", "srun -n {n}"]) == 0
    )
    assert cmds.read_text() == first.replace("mpiexec -n", "srun -n") != first  # replaced


def test_keys_the_sweep_sets_per_run_cannot_be_overridden(tmp_path, capsys):
    study = str(_study(tmp_path, seeds=[0]))
    for extra, words in (
        ("output.dir=/elsewhere", "--set: output.dir is set by the sweep for each run; choose "
         "the sweep directory with the study's 'output' or --out DIR"),
        ("output.name=x", "--set: output.name is set by the sweep"),
        ("dir=/elsewhere", "--set: output.dir is set by the sweep"),  # shorthand keys too
        ("overwrite=true", "--set: output.overwrite is set by the sweep"),
        ("shift=0.2", "--set: data.shift is set by the sweep for each run; it is the study's"),
        ("seed=3", "--set: seed is set by the sweep for each run; list the seeds under"),
        ("data.shift=0.2", "--set: data.shift is set by the sweep for each run; it is the "
         "study's axis"),
        # a section given whole counts by what it holds
        ("output={dir: x}", "--set: output holds output.dir, which is set by the sweep"),
        ("data={shift: 0.2, limit: 50}", "--set: data holds data.shift, which is set by the "
         "sweep for each run; it is the study's axis"),
        ("checkpoint.resume=false", "--set: checkpoint.resume is set by the sweep for each run; "
         "interrupted runs are resumed by --local and by every --emit line"),
        ("checkpoint={every: 2, resume: false}", "--set: checkpoint holds checkpoint.resume"),
    ):  # fmt: skip
        assert cli.main(["sweep", study, "--set", extra]) == 2
        assert f"fedsheaf: error: {words}" in capsys.readouterr().err
    methods = [{"name": "sf", "set": {"sheaf.lam": 0.5}, "grid": {"sheaf.lam": [0.1, 1.0]}}]
    with pytest.raises(ConfigError, match="method sf 'set': sheaf.lam is set by the sweep .* grid"):
        expand(_study(tmp_path, methods=methods), write=False)
    with pytest.raises(ConfigError, match=r"'set': output.dir is set by the sweep"):
        expand(_study(tmp_path, set={"output.dir": "x"}), write=False)
    agents = [{"encoder": [4], "head": [], "classes": [0]}, {"lr": 0.2}]
    grid = [{"name": "sf", "set": {"agents": agents}, "grid": {"agents[1].lr": [0.1]}}]
    with pytest.raises(ConfigError, match=r"agents holds agents\[1\].lr, which is set by the"):
        expand(_study(tmp_path, methods=grid), write=False)
    for key, words in (  # a grid over the sweep's own keys would replace them unseen
        ("data.shift", "method sf: grid: data.shift is set by the sweep for each run; it is"),
        ("seed", "method sf: grid: seed is set by the sweep for each run; list the seeds"),
        ("output.name", "method sf: grid: output.name is set by the sweep for each run"),
    ):
        own = [{"name": "sf", "grid": {key: [1, 2]}}]
        with pytest.raises(ConfigError, match=re.escape(words)):
            expand(_study(tmp_path, methods=own), write=False)
    section = [{"name": "sf", "grid": {"train": [{"lr": 0.1}, {"lr": 0.2}]}}]
    with pytest.raises(ConfigError, match=r"grid train lists the mapping \{lr: 0.1\}; grid"):
        expand(_study(tmp_path, methods=section), write=False)
    # sections given whole that leave the sweep's keys alone pass
    fine = {"checkpoint": {"every": 2}, "data": {"limit": 50}, "output": {}}
    assert len(expand(_study(tmp_path, seeds=[0], set=fine), write=False).runs) == 12
    # a value for the methods that do not grid a key goes in their own 'set'
    both = [{"name": "sf", "grid": {"sheaf.lam": [0.1]}}, {"name": "nc", "set": {"lam": 0.3}}]
    assert len(expand(_study(tmp_path, seeds=[0], methods=both), write=False).runs) == 6


def test_agents_per_rank_emits_fewer_tasks_for_decentralized_methods(tmp_path, capsys):
    # 15 agents, 4 a rank: ceil(15/4) = 4 tasks; a method's own 'ranks' wins
    methods = [
        {"name": "sf", "set": {"algorithm": "sheaf_frl"}},
        {"name": "nc", "set": {"algorithm": "noncoop"}, "ranks": 15},
    ]
    study = str(_study(tmp_path, seeds=[0], methods=methods))
    argv = ["sweep", study, "--emit", "--agents-per-rank", "4", "--launcher", "srun -n {n}"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    lines = (tmp_path / "out/commands-4tasks.txt").read_text().splitlines()
    assert len(lines) == 3 and all(shlex.split(ln)[:3] == ["srun", "-n", "4"] for ln in lines)
    assert "sbatch --array=1-3 --ntasks=4 slurm/sweep_array.sbatch" in out
    assert "sbatch --array=1-3 --ntasks=15 slurm/sweep_array.sbatch" in out
    ranks = {
        r["method"]: r["ranks"]
        for r in json.loads((tmp_path / "out/study.json").read_text())["runs"]
    }
    assert ranks == {"sf": 4, "nc": 15}
    # 100 agents on 8 tasks: 13 a rank; and the dry run prints the same count
    assert cli.main(["sweep", study, "--agents-per-rank", "15"]) == 0
    assert "mpiexec -n 1 fedsheaf run" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:  # argparse's refusal, as for --throttle
        cli.main(["sweep", study, "--agents-per-rank", "0"])
    assert exc.value.code == 2
    assert "argument --agents-per-rank: '0' is not a whole number" in capsys.readouterr().err


def test_out_chooses_the_sweep_directory(tmp_path, capsys):
    study = str(_study(tmp_path, seeds=[0]))
    target = tmp_path / "elsewhere"
    assert cli.main(["sweep", study, "--out", str(target), "--emit"]) == 0
    lines = (target / "commands.txt").read_text().splitlines()
    assert len(lines) == 12 and all(f"output.dir={target / 'runs'}" in ln for ln in lines)
    assert (target / "study.json").is_file() and not (tmp_path / "out").exists()


def _refused(capsys, argv: list[str], words: str) -> None:
    """``fedsheaf sweep argv`` ends with one error line holding ``words`` (no traceback)."""
    assert cli.main(["sweep", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedsheaf: error: ") and err.count("\n") == 1, err
    assert words in err, err


@pytest.mark.parametrize(
    "ranks,shown", [("x", "x"), ([1], "[1]"), (-2, "-2"), (2.7, "2.7"), (0, "0"), (True, "true")]
)
def test_a_methods_ranks_must_be_a_whole_number(tmp_path, capsys, ranks, shown):
    path = _study(
        tmp_path, methods=[{"name": "nc", "set": {"algorithm": "noncoop"}, "ranks": ranks}]
    )
    _refused(
        capsys,
        [str(path), "--emit"],
        f"study file {path}: method nc: 'ranks' must be a whole number of MPI ranks, 1 or "
        f"more, not {shown}",
    )
    assert not (tmp_path / "out").exists()


def test_a_methods_ranks_must_be_the_count_its_runs_take(tmp_path, capsys):
    quick = {"config": str(REPO / "configs/quickstart.yaml"), "set": None, "seeds": [0]}
    path = _study(tmp_path, **quick, methods=[{"name": "sf", "ranks": 5}])
    _refused(
        capsys,
        [str(path), "--emit"],
        "method sf: ranks 5 does not fit run sf-s0-seed0: sheaf_frl runs on 1 to 4 ranks "
        "there (the graph's 4 agents share them); leave 'ranks' out for one rank per agent",
    )
    for fewer in (1, 3):  # decentralized agents share ranks (issue 29)
        path = _study(tmp_path, **quick, methods=[{"name": "sf", "ranks": fewer}])
        assert [r.ranks for r in expand(path, write=False).runs] == [fewer] * 3
    pair = {
        "config": str(REPO / "configs/pair.yaml"),
        "axis": {"name": "d", "preset": "table3", "values": [16]},
        "set": None,
        "seeds": [0],
    }
    path = _study(
        tmp_path, **pair, methods=[{"name": "fp", "set": {"algorithm": "fedproto"}, "ranks": 2}]
    )
    _refused(
        capsys,
        [str(path), "--emit"],
        "method fp: ranks 2 does not fit run fp-d16-seed0: fedproto runs on exactly 3 ranks "
        "there (one per graph node plus a server rank)",
    )
    assert not (tmp_path / "out").exists()  # not even the preset's config and graph
    path = _study(
        tmp_path, **pair, methods=[{"name": "fp", "set": {"algorithm": "fedproto"}, "ranks": 3}]
    )
    assert [r.ranks for r in expand(path, write=False).runs] == [3]
    path = _study(tmp_path, **quick, methods=[{"name": "sf", "ranks": 4}])
    assert [r.ranks for r in expand(path, write=False).runs] == [4] * 3


def test_server_based_methods_name_their_rank_count(tmp_path, capsys):
    def study(**method) -> str:
        return str(
            _study(
                tmp_path,
                config=str(REPO / "configs/fedrep_fmnist_100c2.yaml"),
                set=None,
                seeds=[0],
                axis={"name": "f", "key": "federated.fraction", "values": [0.1]},
                methods=[{"name": "avg", "set": {"algorithm": "fedavg"}, **method}],
            )
        )

    _refused(  # there is no one count to take: the study says which
        capsys,
        [study(), "--emit"],
        "method avg: server-based algorithm fedavg runs on 2 to 101 ranks (a server and "
        "worker ranks that host the 100 clients); choose how many with the method's 'ranks' "
        "(or --agents-per-rank K: K clients a worker)",
    )
    _refused(
        capsys,
        [study(ranks=1), "--emit"],
        "method avg: ranks 1 does not fit run avg-f0.1-seed0: server-based algorithm fedavg "
        "needs at least 2 ranks",
    )
    _refused(capsys, [study(ranks=102), "--emit"], "launch with at most 101 ranks")
    assert not (tmp_path / "out").exists()
    assert cli.main(["sweep", study(ranks=11)]) == 0
    assert capsys.readouterr().out.startswith("mpiexec -n 11 fedsheaf run ")
    # one client: a server and one worker is the only count, as `fedsheaf check` takes it
    one = study(set={"algorithm": "fedavg", "federated.clients": 1})
    assert cli.main(["sweep", one]) == 0
    assert capsys.readouterr().out.startswith("mpiexec -n 2 fedsheaf run ")
    # --agents-per-rank K: a server and ceil(100 / K) workers; a method's 'ranks' wins
    for k, n in ((13, 9), (100, 2), (1000, 2), (1, 101)):
        assert cli.main(["sweep", study(), "--agents-per-rank", str(k)]) == 0
        assert capsys.readouterr().out.startswith(f"mpiexec -n {n} fedsheaf run "), k
    assert cli.main(["sweep", study(ranks=5), "--agents-per-rank", "13"]) == 0
    assert capsys.readouterr().out.startswith("mpiexec -n 5 fedsheaf run ")


def test_a_sweep_directory_is_neither_a_run_nor_another_studys(tmp_path, capsys, monkeypatch):
    fake = tmp_path / "mpiexec"  # should a refusal fail, --local must not start MPI
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("FEDSHEAF_MPIEXEC", str(fake))
    study = str(_study(tmp_path, seeds=[0]))
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("name: x\n")
    (run / "metrics.jsonl").write_text("{}\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "study.json").write_text('{"study": "pair", "runs": []}\n')
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "study.json").write_text("[1, 2]\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    choose = "; choose another sweep directory (--out DIR or the study's 'output')"
    for out, words in (
        (run, f"sweep directory {run} is a run directory (a run's config.yaml and results)"),
        (run / "sweep", f"sweep directory {run / 'sweep'} lies inside the run directory {run}"),
        (other, f"sweep directory {other} holds the runs of study pair (its study.json), not "
         "of study s15"),
        (foreign, f"sweep directory {foreign} holds a study.json that no sweep wrote"),
        (run / "metrics.jsonl", f"sweep directory {run / 'metrics.jsonl'} is a file"),
    ):  # fmt: skip
        for mode in ("--emit", "--local"):
            _refused(capsys, [study, mode, "--out", str(out)], words + choose)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    # the same study continues in its own directory
    (other / "study.json").write_text('{"study": "s15", "runs": []}\n')
    assert cli.main(["sweep", study, "--emit", "--out", str(other)]) == 0
    assert json.loads((other / "study.json").read_text())["study"] == "s15"


def test_a_preset_study_writes_nothing_when_its_emit_target_is_refused(tmp_path, capsys):
    path = _study(
        tmp_path,
        config=str(REPO / "configs/pair.yaml"),
        axis={"name": "d", "preset": "table3", "values": [16]},
        methods=[{"name": "sf"}],
        set=None,
        seeds=[0],
    )
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    _refused(capsys, [str(path), "--emit", str(notes)], f"--emit {notes}: the file exists")
    assert not (tmp_path / "out").exists()


def test_the_study_set_may_not_set_a_grid_key(tmp_path, capsys):
    path = str(_study(tmp_path, seeds=[0]))
    grid = (
        "sheaf.lam is set by the sweep for each run; it is a grid key of method sheaf_frl; to "
        "fix it for the other methods, use their own 'set'"
    )
    _refused(capsys, [path, "--emit", "--set", "sheaf.lam=0.2"], f"error: --set: {grid}")
    _refused(capsys, [path, "--emit", "--set", "lam=0.2"], f"error: --set: {grid}")
    _refused(capsys, [path, "--emit", "--set", "sheaf={lam: 0.2}"], "--set: sheaf holds sheaf.lam")
    path = str(_study(tmp_path, seeds=[0], set={"sheaf.lam": 0.3}))
    _refused(capsys, [path, "--emit"], f"study file {path}: 'set': {grid}")
    both = [
        {"name": "sf", "set": {"algorithm": "sheaf_frl"}, "grid": {"sheaf.lam": [0.1]}},
        {"name": "cf", "set": {"algorithm": "comfed"}, "grid": {"lam": [0.1]}},
    ]
    path = str(_study(tmp_path, seeds=[0], methods=both))
    _refused(capsys, [path, "--set", "sheaf.lam=0.2"], "it is a grid key of methods sf, cf;")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "change,words",
    [
        ({"seeds": [0, 1, 0]}, "'seeds' lists 0 twice"),
        (
            {"axis": {"name": "s", "key": "data.shift", "values": [0.0, 0.6, 0.6]}},
            "axis 'values' lists 0.6 twice",
        ),
        (
            {"methods": [{"name": "sf", "grid": {"sheaf.lam": [1e-5, 0.1, 1e-5]}}]},
            "method sf: grid sheaf.lam lists 1e-05 twice",
        ),
        (
            {"methods": [{"name": "sf", "grid": {"sheaf.fused_pilots": [True, 1]}}]},
            "method sf: grid sheaf.fused_pilots lists true and 1, which are one value",
        ),
        (
            {"methods": [{"name": "nc", "set": {"algorithm": "noncoop"}}, {"name": "nc"}]},
            "two methods are named nc; give them distinct names",
        ),
        (
            {"methods": [{"name": "sf", "grid": {"sheaf.lam": [0.1, 0.1000001]}}]},
            "two different runs would both be named sf-s0-lam0.1-seed0",
        ),
        ({"config": ["a.yaml"]}, "'config' must be a path, not [a.yaml]"),
        ({"output": ["x"]}, "'output' must be a path, not [x]"),
    ],
)
def test_a_repeated_or_misplaced_study_entry_is_named(tmp_path, capsys, change, words):
    path = _study(tmp_path, **change)
    _refused(capsys, [str(path), "--emit"], f"study file {path}: {words}")
    assert not (tmp_path / "out").exists()


def test_a_run_config_that_is_a_directory_or_a_study_is_called_so(tmp_path, capsys):
    path = _study(tmp_path, config=str(REPO / "configs"))
    _refused(capsys, [str(path)], f"run config {REPO / 'configs'} is a directory, not a file")
    path = _study(tmp_path, config=str(REPO / "configs/study15_sweep.yaml"))
    _refused(
        capsys,
        [str(path)],
        f"study file {path}: run config {REPO / 'configs/study15_sweep.yaml'} is a study "
        "file, not a run config",
    )


def test_one_run_is_one_run(tmp_path, capsys):
    path = str(
        _study(
            tmp_path,
            seeds=[0],
            methods=[{"name": "nc", "set": {"algorithm": "noncoop"}}],
            axis={"name": "s", "key": "data.shift", "values": [0.6]},
        )
    )
    assert cli.main(["sweep", path]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "# 1 run; add --local to run it here or --emit to write it to a command file"
    )
    assert cli.main(["sweep", path, "--emit"]) == 0
    assert capsys.readouterr().out.startswith("wrote 1 command to ")


def test_a_relative_run_config_that_is_missing_says_where_it_was_looked_for(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    path = _study(tmp_path, config="configs/mnist15.yaml")
    _refused(
        capsys,
        [str(path)],
        f"run config configs/mnist15.yaml does not exist (relative to the current directory "
        f"{tmp_path}); a study's paths are read from where the sweep is started",
    )


def test_local_refuses_a_study_whose_data_files_are_missing_before_any_launch(tmp_path, capsys):
    """Each run failed on its own (a launch apiece) and the sweep never said why."""
    root = tmp_path / "nodata"
    study = _study(
        tmp_path,
        seeds=[0],
        set={"train.epochs": 1, "data.dataset": "mnist", "data.root": str(root)},
    )
    _refused(
        capsys,
        [str(study), "--local"],
        f"study s15: dataset 'mnist' (train split) not found under data root {root}",
    )
    assert not (tmp_path / "out" / "logs").exists() and not (tmp_path / "out" / "runs").exists()
    from fedsheaf.ops.report_runs import find_runs

    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "out" / "study.json").write_text("{}")
    with pytest.raises(ConfigError, match="is a sweep none of whose runs has started"):
        find_runs([tmp_path / "out"])


def test_a_run_launched_again_keeps_the_earlier_launchs_log(tmp_path):
    """A sweep run again after a run failed: the failure's log is not overwritten."""

    def launch(words: str) -> int:
        argv = [sys.executable, "-c", f"print({words!r}); raise SystemExit(2)"]
        return launch_retrying(argv, dict(os.environ), tmp_path, "r1", "r1")

    assert launch("fedsheaf: error: first") == 2
    assert launch("fedsheaf: error: second") == 2
    assert (tmp_path / "r1.log").read_text().splitlines()[1] == "fedsheaf: error: second"
    previous = (tmp_path / "r1.previous.log").read_text().splitlines()
    assert previous[1] == "fedsheaf: error: first"


def _pair_study(tmp_path: Path, **extra) -> Path:
    """A study of pair runs: Sheaf-FRL on 2 ranks, FedProto on 3 (a server rank more)."""
    raw = {
        "config": str(REPO / "configs/pair.yaml"),
        "set": {"train.epochs": 1},
        "seeds": [0, 1],
        "axis": {"name": "s", "key": "data.shift", "values": [0.2]},
        "methods": [
            {"name": "sf", "set": {"algorithm": "sheaf_frl"}},
            {"name": "fp", "set": {"algorithm": "fedproto"}},
        ],
        **extra,
    }
    return _study(tmp_path, **raw)


def _sbatch_lines(out: str) -> list[list[str]]:
    return [shlex.split(ln) for ln in out.splitlines() if ln.startswith("sbatch ")]


def test_emit_writes_one_list_per_task_count_with_its_sbatch_line(tmp_path, capsys):
    study = str(_pair_study(tmp_path))
    target = tmp_path / "lists" / "commands.txt"
    target.parent.mkdir()
    assert cli.main(["sweep", study, "--emit", str(target), "--throttle", "4"]) == 0
    out = capsys.readouterr().out
    two, three = (tmp_path / "lists" / f"commands-{n}tasks.txt" for n in (2, 3))
    assert not target.exists()
    for path, n, method in ((two, 2, "sf"), (three, 3, "fp")):
        lines = [shlex.split(ln) for ln in path.read_text().splitlines()]
        assert len(lines) == 2 and all(ln[:3] == ["mpiexec", "-n", str(n)] for ln in lines)
        assert [next(w for w in ln if w.startswith("output.name=")) for ln in lines] == [
            f"output.name={method}-s0.2-seed{seed}" for seed in (0, 1)
        ]
    assert _sbatch_lines(out) == [
        ["sbatch", "--array=1-2%4", f"--ntasks={n}", "slurm/sweep_array.sbatch", str(path)]
        for n, path in ((2, two), (3, three))
    ]
    assert "wrote 4 commands in 2 lists" in out
    # without a throttle the array is 1-K; a directory gets commands*.txt inside it
    assert cli.main(["sweep", study, "--emit", f"{tmp_path / 'lists'}/"]) == 0
    assert [ln[1] for ln in _sbatch_lines(capsys.readouterr().out)] == ["--array=1-2"] * 2
    assert two.is_file() and three.is_file()


def test_emit_for_one_task_count_keeps_the_one_file_and_prints_its_line(tmp_path, capsys):
    study = str(_study(tmp_path, seeds=[0]))
    target = tmp_path / "cmds.txt"
    assert cli.main(["sweep", study, "--emit", str(target), "--throttle", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote 12 commands to {target} ")
    assert len(target.read_text().splitlines()) == 12
    assert _sbatch_lines(out) == [
        ["sbatch", "--array=1-12%8", "--ntasks=15", "slurm/sweep_array.sbatch", str(target)]
    ]
    assert cli.main(["sweep", study, "--emit", str(tmp_path)]) == 0  # a directory
    assert len((tmp_path / "commands.txt").read_text().splitlines()) == 12


def test_emit_asks_gpus_for_the_runs_that_train_on_them(tmp_path, capsys):
    cpu_and_auto = [
        {"name": "sf", "set": {"algorithm": "sheaf_frl", "train.device": "cpu"}},
        {"name": "nc", "set": {"algorithm": "noncoop"}},  # train.device: auto
    ]
    study = str(_pair_study(tmp_path, seeds=[0], methods=cpu_and_auto))
    assert cli.main(["sweep", study, "--emit", "--gpus-per-task", "2"]) == 0
    out = tmp_path / "out"
    assert [ln[1:5] for ln in _sbatch_lines(capsys.readouterr().out)] == [
        ["--array=1-1", "--ntasks=2", "slurm/sweep_array.sbatch", str(out / "commands-2tasks.txt")],
        [
            "--array=1-1",
            "--ntasks=2",
            "--gpus-per-task=2",
            "slurm/sweep_array.sbatch",
        ],
    ]
    assert "output.name=nc-" in (out / "commands-2tasks-2gpu.txt").read_text()
    assert "output.name=sf-" in (out / "commands-2tasks.txt").read_text()
    # train.device=cuda asks one GPU a task by itself; auto asks none without the option
    cuda = [{"name": "sf", "set": {"algorithm": "sheaf_frl", "train.device": "cuda"}}]
    study = str(_pair_study(tmp_path, seeds=[0], methods=[*cuda, cpu_and_auto[1]]))
    assert cli.main(["sweep", study, "--emit"]) == 0
    assert [ln[1:4] for ln in _sbatch_lines(capsys.readouterr().out)] == [
        ["--array=1-1", "--ntasks=2", "slurm/sweep_array.sbatch"],
        ["--array=1-1", "--ntasks=2", "--gpus-per-task=1"],
    ]


def test_emit_options_apply_only_to_emit_and_take_positive_counts(tmp_path, capsys):
    study = str(_study(tmp_path, seeds=[0]))
    for option in ("--throttle", "--gpus-per-task"):
        _refused(capsys, [study, option, "2"], f"option {option} applies only to --emit")
        with pytest.raises(SystemExit) as exc:  # argparse's refusal, as for --launcher
            cli.main(["sweep", study, "--emit", option, "0"])
        assert exc.value.code == 2
        assert f"argument {option}: '0' is not a whole number, 1 or more" in (
            capsys.readouterr().err
        )
    assert not (tmp_path / "out").exists()


def test_emit_names_lists_left_from_an_earlier_emit(tmp_path, capsys):
    study = str(_pair_study(tmp_path, seeds=[0]))
    (tmp_path / "out").mkdir()
    old = tmp_path / "out" / "commands.txt"
    old.write_text("mpiexec -n 2 fedsheaf run c.yaml checkpoint.resume=true\n")
    assert cli.main(["sweep", study, "--emit"]) == 0
    err = capsys.readouterr().err
    assert f"{old} is from an earlier --emit and is not one of this sweep's lists" in err
    assert old.is_file()  # named, not removed
