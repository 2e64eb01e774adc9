"""fedsheaf.config.sections: YAML files, key=value overrides, validation, resume configs."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from fedsheaf.config.sections import (
    ALGORITHMS,
    ExperimentConfig,
    apply_overrides,
    dump_config,
    load_config,
    parse_override,
)
from fedsheaf.rundir.resume import resume_config
from fedsheaf.util.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
QUICK = REPO / "configs" / "quickstart.yaml"


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _shipped(kind: str) -> list[Path]:
    """configs/*.yaml of one kind: run configs, sweep studies (a ``study:`` key), and
    the theory toolkit's configs (loaded by their own tests)."""
    out = []
    for path in sorted((REPO / "configs").glob("*.yaml")):
        top = set(yaml.safe_load(path.read_text()))
        found = (
            "study"
            if "study" in top
            else "run"
            if top <= {f.name for f in fields(ExperimentConfig)}
            else "theory"
        )
        out += [path] if found == kind else []
    return out


def test_every_shipped_config_has_a_test():
    assert [p.name for p in _shipped("theory")] == ["ufm_fixed.yaml"]  # test_head_fedavg_math
    assert len(_shipped("run")) >= 10 and len(_shipped("study")) == 5


@pytest.mark.parametrize("path", _shipped("study"), ids=lambda p: p.stem)
def test_shipped_studies_expand_into_valid_run_configs(path, monkeypatch):
    from fedsheaf.ops.study import expand

    monkeypatch.chdir(REPO)  # a study's paths are relative to where it is run from

    runs = expand(path, write=False).runs  # validates every run's resolved config
    expected = {
        "pair_sweep": 558,
        "study15_sweep": 342,
        "pair_fashion_cpu": 18,
        "pilot_budget_cpu": 21,
    }
    assert len(runs) == expected.get(path.stem, 6)
    assert len({r.name for r in runs}) == len(runs)


@pytest.mark.parametrize("path", _shipped("run"), ids=lambda p: p.stem)
def test_shipped_run_configs_load_and_their_dump_reloads_equal(tmp_path, path):
    cfg = load_config(path)
    again = load_config(_write(tmp_path, dump_config(cfg)))
    assert again == cfg and isinstance(again, ExperimentConfig)


def test_overrides_set_nested_keys_list_entries_and_typed_values():
    cfg = load_config(
        QUICK,
        [
            "train.epochs=3",
            "seed=7",
            "train.weight_decay=5e-4",
            "agents[2].lr=0.5",
            "agents[0].classes=[1, 2]",
            "output.name=x y",
            "checkpoint.every=0",
            "train.clip=null",
        ],
    )
    assert cfg.train.epochs == 3 and cfg.seed == 7 and cfg.train.weight_decay == 5e-4
    assert [a.lr for a in cfg.agents] == [None, None, 0.5, None]
    assert cfg.agents[0].classes == [1, 2] and cfg.output.name == "x y"
    assert cfg.checkpoint.every == 0 and cfg.train.clip is None
    assert cfg.checkpoint.keep == 2 and cfg.checkpoint.resume is False
    later = load_config(QUICK, ["seed=1", "seed=2"])
    assert later.seed == 2  # the last override wins


def test_apply_overrides_creates_missing_sections():
    raw = apply_overrides({"name": "n"}, ["train.lr=0.5", "checkpoint.every=2"])
    assert raw == {"name": "n", "train": {"lr": 0.5}, "checkpoint": {"every": 2}}


def test_parse_override_paths():
    assert parse_override("a.b_2[3][0].c=x") == (["a", "b_2", 3, 0, "c"], "x")
    assert parse_override("k=") == (["k"], None)
    assert parse_override("k = [1, 2]") == (["k"], [1, 2])


@pytest.mark.parametrize(
    "override,message",
    [
        ("train.epochs", "must look like key=value"),
        ("=3", "has an empty key"),
        ("train..lr=1", "has an empty key"),
        ("train.lr-x=1", "'lr-x' is not a key name"),
        ("agents[x].lr=1", "'agents[x]' is not a key name"),
        ("train.lr=[1,", "cannot parse value"),
        ("agents[4].lr=1", "'agents' has 4 entries"),
        ("train.lr.x=1", "'train.lr' is not a section"),
        ("seed[0]=1", "'seed' is not a list"),
        ("train[0]=1", "'train' is not a list"),
    ],
)
def test_bad_overrides_are_config_errors(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(QUICK, [override])
    assert message in str(err.value)


@pytest.mark.parametrize(
    "override,message",
    [
        ("train.epoch=3", "unknown config key 'train.epoch' (did you mean 'epochs'?)"),
        ("sed=3", "unknown config key 'sed' (did you mean 'seed'?)"),
        ("agents[1].encodr=[8]", "unknown config key 'agents[1].encodr' (did you mean 'encoder'?)"),
        ("checkpoint.evry=2", "unknown config key 'checkpoint.evry' (did you mean 'every'?)"),
        ("train.epochs=three", "config key 'train.epochs' must be an integer, got 'three'"),
        ("train.epochs=true", "config key 'train.epochs' must be an integer, got true"),
        ("train.epochs=0", "config key 'train.epochs' must be >= 1, got 0"),
        ("train.lr=0", "config key 'train.lr' must be > 0.0"),
        ("train.lr=.nan", "config key 'train.lr' must be a finite number"),
        ("agents[3].lr=-1", "config key 'agents[3].lr' must be > 0.0, got -1.0"),
        ("agents[0].dropout=0.99", "config key 'agents[0].dropout' must be <= 0.95"),
        ("agents[0].encoder=[]", "config key 'agents[0].encoder' needs at least one width"),
        ("train.optimizer=rmsprop", "config key 'train.optimizer' must be one of sgd, nesterov"),
        ("data=5", "config key 'data' must be a mapping of keys to values, got 5"),
        ("checkpoint.every=-1", "config key 'checkpoint.every' must be >= 0"),
        ("checkpoint.keep=0", "config key 'checkpoint.keep' must be >= 1"),
        ("checkpoint.resume=maybe", "config key 'checkpoint.resume' must be true/false"),
        ("graph=null", "algorithm sheaf_frl needs config key 'graph'"),
        ("name=null", "config key 'name' must be a string, got null"),
        (
            "agents[0].encoder=[8, false]",
            "config key 'agents[0].encoder[1]' must be an integer, got false",
        ),
    ],
)
def test_bad_values_name_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(QUICK, [override])
    assert message in str(err.value)
    assert str(err.value).startswith(f"override '{override}': ")


def test_an_error_names_the_override_that_set_the_key_else_the_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(QUICK, ["seed=1", "batch_size=abc", "train.lr=0.5"])
    assert str(err.value).startswith("override 'batch_size=abc': config key 'train.batch_size'")
    with pytest.raises(ConfigError) as err:  # the last override of a key is the one used
        load_config(QUICK, ["train.batch_size=8", "train={batch_size: 0}"])
    assert str(err.value).startswith("override 'train={batch_size: 0}': config key")
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(QUICK).read_text().replace("seed: 0", "seed: zero"))
    with pytest.raises(ConfigError) as err:  # the file's own mistake, overrides elsewhere
        load_config(bad, ["train.lr=0.5"])
    assert str(err.value).startswith(f"{bad}: config key 'seed' must be an integer")


def test_resume_excludes_overwrite_and_every_algorithm_can_resume():
    with pytest.raises(ConfigError, match="'checkpoint.resume' and 'output.overwrite'"):
        load_config(QUICK, ["checkpoint.resume=true", "output.overwrite=true"])
    pair = REPO / "configs/pair.yaml"  # equal latent sizes, as FedProto/FedMuscle need
    for algorithm in ALGORITHMS:
        cfg = load_config(pair, [f"algorithm={algorithm}", "checkpoint.resume=true"])
        assert cfg.checkpoint.resume is True


@pytest.mark.parametrize(
    "text,message",
    [
        ("name: [unclosed", "is not valid YAML"),
        ("- a\n- b\n", "must hold a YAML mapping at top level"),
        ("", "must hold a YAML mapping at top level"),
        ("just text", "must hold a YAML mapping at top level"),
        ("algorithm: sheaf_frl\n", "missing required config key 'name'"),
        ("name: x\nname: y\n", r"line 2, column 1: .* the key 'name' twice \(the first at line 1"),
    ],
)
def test_bad_files(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory, not a file"):
        load_config(tmp_path)  # a directory
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(ConfigError, match="b.yaml (cannot be read|is not valid YAML)"):
        load_config(binary)


def test_resume_config_points_at_the_run_directory(tmp_path):
    cfg = load_config(QUICK, ["output.dir=elsewhere", "output.name=first", "seed=4"])
    run = tmp_path / "moved" / "first"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(dump_config(cfg))
    again = resume_config(run, ["train.epochs=20"])
    assert again.checkpoint.resume is True and again.output.overwrite is False
    assert Path(again.output.dir) / again.run_name() == run.resolve()
    assert again.seed == 4 and again.train.epochs == 20
    assert again.agents == cfg.agents


def test_resume_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no config.yaml there"):
        resume_config(tmp_path)
    with pytest.raises(ConfigError, match=r"^cannot resume \S+/gone: no such directory$"):
        resume_config(tmp_path / "gone")
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match=r"^cannot resume \S+/f: a file, not a run directory$"):
        resume_config(tmp_path / "f")
    (tmp_path / "config.yaml").write_text("name: x\noutput: 3\n")
    with pytest.raises(ConfigError, match="'output' must be a section"):
        resume_config(tmp_path)
    (tmp_path / "config.yaml").write_text(dump_config(load_config(QUICK)))
    with pytest.raises(ConfigError, match="unknown config key 'train.ephocs'"):
        resume_config(tmp_path, ["train.ephocs=3"])
    for placing in (
        "output.overwrite=true",
        "output.name=other",
        "output={dir: x}",
        "checkpoint.resume=false",
        "checkpoint={resume: false}",
    ):  # --resume fixes where the run is and that it resumes: refused, not ignored
        with pytest.raises(ConfigError) as err:
            resume_config(tmp_path, [placing])
        assert str(err.value).startswith(
            f"cannot resume {tmp_path} with '{placing}': --resume continues the run in place"
        )
        assert f"fedsheaf run {tmp_path / 'config.yaml'} output.overwrite=true" in str(err.value)
    assert resume_config(tmp_path, ["checkpoint.every=3"]).checkpoint.every == 3


def test_single_word_overrides_resolve_to_their_only_section():
    from fedsheaf.config.sections import load_config

    cfg = load_config("configs/fedrep_fmnist_100c2.yaml", ["rounds=3", "epochs=4", "lr=0.5"])
    assert (cfg.federated.rounds, cfg.train.epochs, cfg.train.lr) == (3, 4, 0.5)
    with pytest.raises(ConfigError, match="unknown config key 'dropout'"):
        load_config("configs/quickstart.yaml", ["dropout=0.2"])  # per agent, not a section key


def test_default_run_name_separates_algorithms_and_seeds():
    names = {
        load_config(QUICK, [f"algorithm={a}", f"seed={s}"]).run_name()
        for a in ("sheaf_frl", "noncoop")
        for s in (0, 1)
    }
    assert names == {f"quickstart-{a}-seed{s}" for a in ("sheaf_frl", "noncoop") for s in (0, 1)}
    assert load_config(QUICK, ["output.name=mine"]).run_name() == "mine"


def test_settings_the_algorithm_never_reads_are_named():
    assert load_config(REPO / "configs/pair.yaml").ignored_settings() == []
    assert load_config(REPO / "configs/fedrep_fmnist_100c2.yaml").ignored_settings() == []
    assert load_config(REPO / "configs/head_fedavg_geo.yaml").ignored_settings() == []
    # a decentralized config run as FedAvg: its graph, agents, baselines' settings and
    # epochs mean nothing there
    fedavg = load_config(
        REPO / "configs/pair.yaml", ["algorithm=fedavg", "baseline.comfed.rank=8"]
    ).ignored_settings()
    assert fedavg == [
        "graph, agents, baseline (decentralized and hub methods only)",
        "train.epochs (server-based runs count federated.rounds and federated.local_epochs, "
        "for FedRep head_epochs and body_epochs)",
    ]
    fedrep = load_config(
        REPO / "configs/fedrep_fmnist_100c2.yaml",
        [
            "train.steps_per_epoch=3",
            "sheaf.lam=1",
            "agents=[{encoder: [4], head: [], classes: [0]}]",
            "head.rho=1",
        ],
    )
    assert "agents, sheaf (decentralized and hub methods only)" in fedrep.ignored_settings()
    assert any(s.startswith("head (head_fedavg only)") for s in fedrep.ignored_settings())
    quick = load_config(REPO / "configs/quickstart.yaml", ["rounds=4", "head.rho=1"])
    assert quick.ignored_settings() == [
        "federated (server-based methods only)",
        "head (head_fedavg only)",
    ]
    # setting a key to its default is not a setting
    assert load_config(REPO / "configs/quickstart.yaml", ["rounds=100"]).ignored_settings() == []
    # within a section: what the chosen optimizer or pilot strategy does not read
    extra = ["train.optimizer=adam", "train.momentum=0.5", "sheaf.prototype_members=3"]
    assert load_config(REPO / "configs/quickstart.yaml", extra).ignored_settings() == [
        "sheaf.prototype_members (pilot_strategy prototype or kmeans only)",
        "train.momentum (Adam has no momentum term; sgd and nesterov read it)",
    ]
    kmeans = [*extra[2:], "sheaf.pilot_strategy=kmeans"]
    assert load_config(REPO / "configs/quickstart.yaml", kmeans).ignored_settings() == []


def test_a_run_name_must_fit_one_directory_name():
    with pytest.raises(ConfigError, match="at most 255 bytes without NUL"):
        load_config(QUICK, ["output.name=" + "a" * 256])
    assert load_config(QUICK, ["output.name=" + "é" * 127]).output.name == "é" * 127
    with pytest.raises(ConfigError, match="at most 255 bytes"):
        load_config(QUICK, ["output.name=" + "é" * 128])  # 256 bytes in UTF-8
    with pytest.raises(ConfigError, match="run directory name <name>-<algorithm>-seed<seed>"):
        load_config(QUICK, ["name=" + "a" * 250])  # fits alone, not with its suffix
    assert load_config(QUICK, ["name=" + "a" * 250, "output.name=short"]).name == "a" * 250


def test_a_run_config_written_before_a_key_existed_reads_as_it_ran(tmp_path):
    from fedsheaf.rundir.resume import check_resume

    fedrep = REPO / "configs" / "fedrep_fmnist_100c2.yaml"
    run = tmp_path / "old"
    run.mkdir()
    raw = yaml.safe_load(dump_config(load_config(fedrep, [f"output.dir={tmp_path}"])))
    del raw["federated"]["distinct_classes"]  # as fedsheaf wrote it before the key
    (run / "config.yaml").write_text(yaml.safe_dump(raw))
    assert resume_config(run).federated.distinct_classes is True  # the draw it ran with
    cfg = load_config(fedrep, [f"output.dir={tmp_path}", "output.name=old"])
    with pytest.raises(ConfigError, match=r"federated.distinct_classes \(True -> False\)") as no:
        check_resume(run, cfg)
    # what may change says how: --resume RUN_DIR refuses output.* overrides
    assert "output* (by checkpoint.resume=true; --resume RUN_DIR keeps the run where it is)" in (
        str(no.value)
    )
    assert check_resume(run, resume_config(run)).federated.distinct_classes is True
    # a decentralized run never read the key: its old config resumes under a new one
    quick = load_config(QUICK, [f"output.dir={tmp_path}", "output.name=dec"])
    raw = yaml.safe_load(dump_config(quick))
    del raw["federated"]["distinct_classes"]
    (tmp_path / "dec").mkdir()
    (tmp_path / "dec" / "config.yaml").write_text(yaml.safe_dump(raw))
    assert check_resume(tmp_path / "dec", quick).federated.distinct_classes is False


def test_same_graph_looks_at_the_graph_not_the_text(tmp_path):
    from fedsheaf.rundir.resume import same_graph

    text = (REPO / "graphs" / "quick4.yaml").read_text()
    commented = tmp_path / "a.yaml"
    commented.write_text("# rebuilt\n" + text.replace("name: quick4", "name: other"))
    fewer = tmp_path / "b.yaml"
    fewer.write_text(text.replace("  - [0, 2]\n", ""))
    assert same_graph(REPO / "graphs" / "quick4.yaml", commented)
    assert not same_graph(REPO / "graphs" / "quick4.yaml", fewer)
    assert not same_graph(REPO / "graphs" / "quick4.yaml", tmp_path / "missing.yaml")


def test_a_mapping_given_to_a_section_merges_into_it():
    base = load_config(QUICK)
    cfg = load_config(QUICK, ["train={epochs: 1, lr: 0.5}", "agents[0]={dropout: 0.4}"])
    assert (cfg.train.epochs, cfg.train.lr) == (1, 0.5)
    assert cfg.train.batch_size == base.train.batch_size  # kept, not reset to the default
    assert (cfg.train.momentum, cfg.train.clip) == (base.train.momentum, base.train.clip)
    assert cfg.agents[0].dropout == 0.4 and cfg.agents[0].encoder == base.agents[0].encoder
    # anything else replaces: a list, or a value where a section was
    one = load_config(QUICK, ["agents[0].classes=[1]", "agents[0].classes=[2, 3]"])
    assert one.agents[0].classes == [2, 3]
    with pytest.raises(ConfigError, match="train"):
        load_config(QUICK, ["train=3"])
