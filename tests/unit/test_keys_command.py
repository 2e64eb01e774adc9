"""`fedsheaf keys`: the listing is the schema (every listed key is a valid override)."""

import dataclasses
import io
import json

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.cli.keys import keys
from fedsheaf.config.schema import describe, to_dict
from fedsheaf.config.sections import AgentConfig, ExperimentConfig, FederatedConfig, load_config
from fedsheaf.models.registry import AGENT_MODELS, SERVER_MODELS
from fedsheaf.util.errors import ConfigError

QUICKSTART = "configs/quickstart.yaml"


def test_every_listed_default_is_accepted_and_is_the_default():
    skip = ("name", "graph")  # required by the quickstart's algorithm
    rows = [r for r in describe(ExperimentConfig) if "[i]" not in r.key and r.key not in skip]
    base = to_dict(load_config(QUICKSTART))
    plain = to_dict(ExperimentConfig(name="x"))
    for row in rows:
        cfg = to_dict(load_config(QUICKSTART, [f"{row.key}={row.default}"]))
        node, want = cfg, plain
        for part in row.key.split("."):
            node, want = node[part], want[part]
        assert node == json.loads(row.default) == want, row.key
        assert cfg.keys() == base.keys()


def test_agent_keys_and_constraints_are_listed():
    rows = {r.key: r for r in describe(ExperimentConfig)}
    assert rows["agents[i].classes"].default == "(required)"
    assert rows["agents[i].encoder"].default == "null"  # (required by the built-in cnn)
    assert rows["agents[i].model"].default == '"cnn"'
    assert rows["agents[i].lr"].allowed == "> 0.0"
    assert rows["data.shift"].allowed == ">= 0.0, <= 1.0"
    assert rows["train.optimizer"].allowed == "sgd | nesterov | adam"
    assert rows["output.overwrite"].type == "bool"
    assert "K pilots per step" in rows["sheaf.pilot_batch"].doc


def test_prefix_filter_and_unknown_prefix():
    out = io.StringIO()
    assert keys("sheaf.", out) == 0
    text = out.getvalue()
    assert text.startswith("sheaf.lam") and "train." not in text
    assert "    penalty weight λ" in text  # doc lines are indented under their key
    with pytest.raises(ConfigError, match="no config key starts with 'trian'; sections: agents"):
        keys("trian")
    out = io.StringIO()
    assert keys("agents[2].lr", out) == 0  # written as an override is written
    assert out.getvalue().startswith("agents[i].lr ")


def test_cli_keys(capsys):
    assert cli.main(["keys", "checkpoint"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == [
        "checkpoint.every",
        "int",
        "1",
        ">=",
        "0",
    ]
    assert cli.main(["keys", "nope"]) == 2
    assert "fedsheaf: error: no config key" in capsys.readouterr().err


def test_the_default_models_are_built_ins_of_their_registries():
    (server,) = [f for f in dataclasses.fields(FederatedConfig) if f.name == "model"]
    (agent,) = [f for f in dataclasses.fields(AgentConfig) if f.name == "model"]
    assert server.default in SERVER_MODELS.builtin and agent.default in AGENT_MODELS.builtin


def test_every_key_says_what_it_means():
    undocumented = [r.key for r in describe(ExperimentConfig) if not r.doc.strip()]
    assert undocumented == []
