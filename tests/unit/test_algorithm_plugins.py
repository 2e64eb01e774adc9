"""Decentralized algorithms as plug-ins (config keys ``algorithm``, ``algorithm_args``), the
plug-in listings of ``fedsheaf keys`` and ``fedsheaf check``, and the public registration
decorators. A user's algorithm lives in a module of its own that only ``sys.path`` names;
an installed one is a dist-info with entry points on ``sys.path``, as pip lays it."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from fedsheaf.algorithms import DECENTRALIZED, algorithm_factory
from fedsheaf.algorithms.registry import ALGORITHMS_REGISTRY, sheaf_frl
from fedsheaf.cli import main as cli
from fedsheaf.cli.keys import keys, plugin_registries
from fedsheaf.config.sections import DECENTRALIZED as DECENTRALIZED_NAMES
from fedsheaf.config.sections import load_config
from fedsheaf.rundir.files import is_fedsheaf_config
from fedsheaf.util.errors import ConfigError
from tests.conftest import REPO, mpi_env

QUICK = "configs/quickstart.yaml"
USER = "fedsheaf_test_useralgo"

USER_CODE = """
from fedsheaf.algorithms.noncoop import NonCooperative


class Tagged(NonCooperative):
    '''NonCooperative with one override: its summary says its tag.'''

    def __init__(self, agent, nbr, reporter, tag="t"):
        super().__init__(agent, nbr, reporter)
        self.tag = tag

    def summary_extras(self, records):
        return {"tag": self.tag}


def returns_a_number(agent, nbr, reporter):
    return 42


class Refuses(NonCooperative):
    def __init__(self, agent, nbr, reporter):
        raise ValueError("this agent's data are too few")


class NotAnAlgorithm:
    def __init__(self, agent, nbr, reporter):
        pass


class Builder:
    @staticmethod
    def build(agent, nbr, reporter):
        return Tagged(agent, nbr, reporter, tag="built")
"""


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    code = tmp_path / "usercode"
    code.mkdir()
    (code / f"{USER}.py").write_text(textwrap.dedent(USER_CODE))
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.delitem(sys.modules, USER, raising=False)
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    return code


@pytest.fixture
def installed(user_code, tmp_path, monkeypatch):
    """A distribution declaring entry points in group fedsheaf.algorithms."""
    dist = tmp_path / "site" / "fakealgo-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakealgo\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[fedsheaf.algorithms]\ntaggedplug = {USER}:Tagged\nbrokenplug = fedsheaf_absent:X\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return dist


def cfg_of(*overrides: str):
    return load_config(QUICK, list(overrides))


# ---- the registry -------------------------------------------------------------------------
def test_the_built_ins_register_through_the_registry():
    assert ALGORITHMS_REGISTRY.builtin == list(DECENTRALIZED_NAMES)
    assert (ALGORITHMS_REGISTRY.group, ALGORITHMS_REGISTRY.key) == (
        "fedsheaf.algorithms",
        "algorithm",
    )
    assert ALGORITHMS_REGISTRY.args_key == "algorithm_args"
    assert DECENTRALIZED == {n: ALGORITHMS_REGISTRY.resolve(n) for n in DECENTRALIZED_NAMES}
    assert DECENTRALIZED["sheaf_frl"] is sheaf_frl


# ---- the config keys ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "close"), [("noncoopp", "noncoop"), ("sheaf-frl", "sheaf_frl"), ("fedavgg", "fedavg")]
)
def test_a_typo_of_a_built_in_gets_a_did_you_mean(name, close):
    with pytest.raises(ConfigError) as err:
        cfg_of(f"algorithm={name}")
    text = str(err.value)
    assert (
        f"config key 'algorithm': algorithm {name!r} is unknown (did you mean {close!r}?)" in text
    )
    assert "entry-point group fedsheaf.algorithms" in text and "\n" not in text


def test_an_inline_algorithm_is_decentralized_and_names_its_run_by_its_last_attribute():
    cfg = cfg_of(f"algorithm={USER}:Tagged", "algorithm_args={tag: x}")
    assert cfg.decentralized and not cfg.hub_based
    assert cfg.algorithm_args == {"tag": "x"}
    assert cfg.run_name() == f"quickstart-Tagged-seed{cfg.seed}"
    assert cfg_of(f"algorithm={USER}:Builder.build").run_name() == "quickstart-build-seed0"
    assert cfg.ignored_settings() == []
    with pytest.raises(ConfigError, match="must look like 'package.module:callable'"):
        cfg_of(f"algorithm='{USER}:'")
    with pytest.raises(ConfigError, match="must look like 'package.module:callable'"):
        cfg_of("algorithm=a/b:c")


def test_algorithm_args_are_said_ignored_outside_decentralized_runs():
    cfg = load_config("configs/fedrep_fmnist_100c2.yaml", ["algorithm_args={tag: x}"])
    assert any(w.startswith("algorithm_args (decentralized") for w in cfg.ignored_settings())


def test_a_run_directory_of_a_plugin_algorithm_reads_as_fedsheafs(tmp_path):
    for algorithm in (f"{USER}:Tagged", "someplug", "noncoop"):
        path = tmp_path / f"{algorithm.replace(':', '_')}.yaml"
        path.write_text(yaml.safe_dump({"name": "x", "algorithm": algorithm, "seed": 1}))
        assert is_fedsheaf_config(path), algorithm
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "algorithm": ["a list"]}))
    assert not is_fedsheaf_config(path)


# ---- resolving: one line naming the key --------------------------------------------------
@pytest.mark.parametrize(
    ("ref", "args", "message"),
    [
        ("fedsheaf_absent_module:X", {}, "does not import: no module named"),
        (f"{USER}:Nothing", {}, f"does not exist: {USER} has no 'Nothing'"),
        (f"{USER}:NotAnAlgorithm", {}, "is the class NotAnAlgorithm, not a fedsheaf.algorithms"),
        (f"{USER}:Tagged", {"tga": 1}, "cannot be called as factory(agent, nbr, reporter, **"),
        ("noncoop", {"tag": 1}, "with algorithm_args {tag: 1}: got an unexpected keyword"),
    ],
)
def test_what_does_not_resolve_is_one_config_error(user_code, ref, args, message):
    cfg = cfg_of(
        f"algorithm={ref}",
        f"algorithm_args={yaml.safe_dump(args, default_flow_style=True).strip()}",
    )
    with pytest.raises(ConfigError) as err:
        algorithm_factory(cfg)
    text = str(err.value)
    assert text.startswith(f"config key 'algorithm': algorithm {ref!r} ") and "\n" not in text
    assert message in text, text


def test_an_installed_algorithm_is_found_by_its_entry_point(installed):
    cfg = cfg_of("algorithm=taggedplug")
    assert cfg.run_name() == "quickstart-taggedplug-seed0"
    assert algorithm_factory(cfg).__name__ == "Tagged"
    with pytest.raises(ConfigError, match="'brokenplug' .entry point 'fedsheaf_absent:X'. cannot"):
        algorithm_factory(cfg_of("algorithm=brokenplug"))
    with pytest.raises(ConfigError, match=r"installed plug-ins .*: brokenplug, taggedplug;"):
        cfg_of("algorithm=taggedplugg")


# ---- fedsheaf check ------------------------------------------------------------------------
def check(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_names_the_plugins_a_config_uses(capsys, installed, tmp_path):
    out_dir = tmp_path / "runs"
    code, out, err = check(
        capsys,
        QUICK,
        f"output.dir={out_dir}",
        f"algorithm={USER}:Tagged",
        "algorithm_args={tag: a}",
    )
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith(f"fedsheaf check: ok for 4 ranks: {USER}:Tagged 'quickstart'")
    assert lines[2:6] == [
        "fedsheaf check: uses data.dataset = digits -> built-in",
        "fedsheaf check: uses data.partition = label_shift -> built-in",
        "fedsheaf check: uses agents[i].model = cnn -> built-in",
        f"fedsheaf check: uses algorithm = {USER}:Tagged -> inline",
    ]
    assert (
        lines[-1] == f"fedsheaf check: would write a new run in {out_dir}/quickstart-Tagged-seed0"
    )
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}", "algorithm=taggedplug")
    assert code == 0, err
    assert f"fedsheaf check: uses algorithm = taggedplug -> entry point {USER}:Tagged" in out
    assert not out_dir.exists()


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("noncoopp", "is unknown (did you mean 'noncoop'?)"),
        ("fedsheaf_absent_module:X", "does not import: no module named 'fedsheaf_absent_module'"),
        (f"{USER}:returns_a_number", "returned an instance of int, not a fedsheaf.algorithms"),
        (f"{USER}:NotAnAlgorithm", "is the class NotAnAlgorithm, not a"),
        (f"{USER}:Refuses", "failed to build: ValueError: this agent's data are too few"),
    ],
)
def test_check_fails_on_a_bad_algorithm_with_its_one_line(
    capsys, user_code, tmp_path, ref, message
):
    code, out, err = check(capsys, QUICK, f"output.dir={tmp_path / 'runs'}", f"algorithm={ref}")
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("fedsheaf: error: ") and "config key 'algorithm'" in line
    assert message in line, line


# ---- fedsheaf keys -------------------------------------------------------------------------
def test_keys_lists_every_registry_with_its_installed_plugins(installed):
    out = io.StringIO()
    assert keys(out=out) == 0
    text = out.getvalue()
    listing = text[text.index("\nPlug-ins: ") :]
    kinds = [reg.key for reg, _ in plugin_registries()]
    assert kinds == [
        "data.dataset",
        "agents[i].model",
        "federated.model",
        "data.partition",
        "federated.partition",
        "algorithm",
        "federated.aggregator",
    ]
    assert (
        "algorithm: algorithm, arguments algorithm_args, entry-point group fedsheaf.algorithms\n"
        in listing
    )
    assert "    built-in: sheaf_frl, noncoop, comfed, sheaf_fmtl\n" in listing
    assert f"    installed: brokenplug -> fedsheaf_absent:X, taggedplug -> {USER}:Tagged" in listing
    assert "    built-in: fedavg, fedadagrad, fedadam, fedyogi, median, trimmed_mean\n" in listing
    for reg, _ in plugin_registries():
        assert f"{reg.kind}: {reg.key}, arguments {reg.args_key}, " in listing
    # a prefix keeps the registries its keys name
    out = io.StringIO()
    keys("algorithm", out=out)
    assert "entry-point group fedsheaf.algorithms" in out.getvalue()
    assert "fedsheaf.aggregators" not in out.getvalue()
    out = io.StringIO()
    keys("sheaf.", out=out)
    assert "Plug-ins" not in out.getvalue()


def test_the_markdown_page_lists_the_registries_whatever_is_installed(installed):
    out = io.StringIO()
    keys(out=out, markdown=True)
    page = out.getvalue()
    assert "\n## Plug-ins\n" in page
    row = next(line for line in page.splitlines() if line.startswith("| algorithm | `algorithm`"))
    assert "`fedsheaf.algorithms`" in row and "`sheaf_frl`, `noncoop`" in row
    assert "taggedplug" not in page  # (installed plug-ins: the plain listing only)
    assert page == (REPO / "docs" / "reference" / "config-keys.md").read_text()


# ---- the public decorators ----------------------------------------------------------------
DECORATORS = """
import fedsheaf
from fedsheaf.algorithms.noncoop import NonCooperative
from fedsheaf.algorithms.registry import ALGORITHMS_REGISTRY
from fedsheaf.algorithms.federated.aggregators import AGGREGATORS
from fedsheaf.config.sections import load_config
from fedsheaf.data.datasets_registry import DATASETS
from fedsheaf.data.partitions_registry import GRAPH_PARTITIONS, SERVER_PARTITIONS
from fedsheaf.models.registry import AGENT_MODELS, SERVER_MODELS
from fedsheaf.models.seeded import GeneratorDropout

@fedsheaf.register_algorithm("api_algo")
class Mine(NonCooperative):
    pass

@fedsheaf.register_dataset("api_data")
def data(root, split, download):
    return None

@fedsheaf.register_model("api_model")
def model(input_shape, n_classes):
    return None

@fedsheaf.register_server_model("api_server_model")
def server_model(input_shape, n_classes):
    return None

@fedsheaf.register_partition("api_part")
def part(labels, n_parties, seed=0):
    return None

found = [
    ALGORITHMS_REGISTRY.resolve("api_algo") is Mine,
    DATASETS.resolve("api_data") is data,
    AGENT_MODELS.resolve("api_model") is model,
    SERVER_MODELS.resolve("api_server_model") is server_model,
    GRAPH_PARTITIONS.resolve("api_part") is part,
    SERVER_PARTITIONS.resolve("api_part") is part,
    fedsheaf.GeneratorDropout is GeneratorDropout,
]
print("FOUND", found)
cfg = load_config("configs/quickstart.yaml", ["algorithm=api_algo"])
print("RUN", cfg.run_name(), cfg.decentralized)
for register, name in [
    (fedsheaf.register_algorithm, "api_algo"),
    (fedsheaf.register_algorithm, "fedavg"),
    (fedsheaf.register_partition, "shards"),
    (fedsheaf.register_dataset, "no:colon"),
]:
    try:
        register(name)(part)
        print("ACCEPTED", name)
    except ValueError as exc:
        print("REFUSED", exc)
print("GRAPH", GRAPH_PARTITIONS.builtin)
"""


def test_the_decorators_register_where_the_runs_look():
    """In a process of its own: what it registers stays there."""
    env = mpi_env()
    for name in [k for k in env if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "PMI_"))]:
        del env[name]
    proc = subprocess.run(
        [sys.executable, "-c", DECORATORS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "FOUND " + str([True] * 7)
    assert lines[1] == "RUN quickstart-api_algo-seed0 True"
    assert lines[2] == "REFUSED algorithm 'api_algo' is registered twice"
    assert lines[3] == "REFUSED algorithm 'fedavg' is a built-in method's name"
    assert lines[4] == "REFUSED partition 'shards' is registered twice"
    assert lines[5].startswith("REFUSED a dataset name must be a plain word")
    assert lines[6] == "GRAPH ['label_shift', 'dirichlet', 'api_part']"  # (not half-registered)


def test_the_decorators_are_public_and_documented():
    import fedsheaf

    for name in (
        "register_dataset",
        "register_model",
        "register_server_model",
        "register_partition",
        "register_algorithm",
        "register_aggregator",
        "GeneratorDropout",
    ):
        assert name in fedsheaf.__all__ and name in (fedsheaf.__doc__ or ""), name
        assert (getattr(fedsheaf, name).__doc__ or "").strip(), name
    assert Path(fedsheaf.__file__).parent == REPO / "fedsheaf"
