"""Models as plug-ins (fedsheaf.models.registry): the built-in cnn and fedrep_cnn are
registered factories that build today's models bit for bit; a user's factory named as
'module:callable' is seeded without touching torch's global generator, checked once
(encode/decode, d against the graph file, logits' shape, no global-generator dropout),
and a server model's head and body follow its HEAD attribute."""

from __future__ import annotations

import sys

import pytest
import torch
import yaml

from fedsheaf.algorithms.federated import FEDERATED
from fedsheaf.algorithms.federated.schedule import Phase
from fedsheaf.algorithms.federated.setup import ClientData
from fedsheaf.algorithms.federated.trainer import ClientRunner
from fedsheaf.config.schema import build
from fedsheaf.config.sections import ExperimentConfig, FederatedConfig, TrainConfig
from fedsheaf.models.encoders import build_agent_model
from fedsheaf.models.fedrep_cnn import build_fedrep_cnn
from fedsheaf.models.registry import (
    AGENT_MODELS,
    SERVER_MODELS,
    body_names,
    build_agent,
    build_server_model,
    head_names,
)
from fedsheaf.runtime import experiment
from fedsheaf.util.errors import ConfigError
from tests.user_models import MODULE, write_user_models

CNN_ARGS = {"encoder": [4, 8], "head": [12], "dropout": 0.2, "whitening": "zca"}


@pytest.fixture
def user_models(tmp_path, monkeypatch):
    """usermodels.py importable (a fresh import for each test)."""
    monkeypatch.syspath_prepend(str(write_user_models(tmp_path / "code")))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield
    sys.modules.pop(MODULE, None)


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_the_built_ins_build_todays_models_bit_for_bit():
    assert AGENT_MODELS.builtin == ["cnn"] and SERVER_MODELS.builtin == ["fedrep_cnn"]
    cnn = build_agent("cnn", 0, (1, 8, 8), 10, CNN_ARGS, 123)
    assert _same(cnn, build_agent_model(1, [4, 8], [12], 0.2, 10, "zca", seed=123))
    fedrep = build_server_model("fedrep_cnn", (3, 32, 32), 10, {}, 5)
    assert _same(fedrep, build_fedrep_cnn(3, (32, 32), 10, seed=5))
    assert head_names(fedrep) == fedrep.head_names() == ["fc3.weight", "fc3.bias"]
    assert body_names(fedrep) == fedrep.body_names()


@pytest.mark.parametrize("factory", ["mlp", "mlp_seeded"])
def test_a_plug_in_is_seeded_without_touching_the_global_generator(user_models, factory):
    ref = f"{MODULE}:{factory}"
    torch.manual_seed(99)
    before = torch.random.get_rng_state()
    a = build_agent(ref, 0, (1, 8, 8), 10, {"d": 6}, 1)
    after = torch.random.get_rng_state()
    assert torch.equal(before, after)  # never reseeds nor draws from the caller's generator
    assert _same(a, build_agent(ref, 0, (1, 8, 8), 10, {"d": 6}, 1))  # same seed, same weights
    assert not _same(a, build_agent(ref, 0, (1, 8, 8), 10, {"d": 6}, 2))


def test_agent_model_builds_checks_and_seeds_a_plug_in(user_models, tmp_path):
    cfg = _config(tmp_path, [8, 12, 8])
    ds, _ = experiment.load_and_partition(cfg)
    m0 = experiment.agent_model(cfg, ds, 0, torch.device("cpu"))
    assert _same(m0, experiment.agent_model(cfg, ds, 0, torch.device("cpu")))
    assert m0.encode(ds.take(slice(0, 5))).shape == (5, 8)
    m0.train()  # its GeneratorDropout draws from the agent's own generator
    m0.decode(m0.encode(ds.take(slice(0, 5)))).sum().backward()
    m2 = experiment.agent_model(cfg, ds, 2, torch.device("cpu"))  # the cnn beside it
    assert type(m2).__name__ == "AgentModel" and m2.latent_dim == 8


def test_a_latent_size_other_than_the_graphs_is_one_line_naming_the_agent(user_models, tmp_path):
    cfg = _config(tmp_path, [8, 16, 8])  # agent 1 encodes to d = 12
    ds, _ = experiment.load_and_partition(cfg)
    with pytest.raises(ConfigError) as err:
        experiment.agent_model(cfg, ds, 1, torch.device("cpu"))
    msg = str(err.value)
    assert msg == (
        f"config key 'agents[1].model': agent model '{MODULE}:mlp' encodes to d = 12 but "
        f"graph {cfg.graph} gives node 1 dim 16"
    )


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("no_encode", "built a DecodeOnly without encode(): an agent model needs encode(x)"),
        ("wrong_logits", "decode(z) gave (2, 11) for latents of shape (2, 8); it must give"),
        ("torch_dropout", "has dropout dec.0 (Dropout(p=0.2)), which draws from torch's global"),
        ("nope", "does not exist: usermodels has no 'nope'"),
    ],
)
def test_a_faulty_plug_in_agent_model_is_one_line(user_models, tmp_path, factory, said):
    cfg = _config(tmp_path, [8, 12, 8], model=f"{MODULE}:{factory}", args={})
    ds, _ = experiment.load_and_partition(cfg)
    with pytest.raises(ConfigError) as err:
        experiment.agent_model(cfg, ds, 0, torch.device("cpu"))
    msg = str(err.value)
    assert msg.startswith("config key 'agents[0].model':") and said in msg, msg
    assert "\n" not in msg


def test_model_args_are_checked_against_the_factory(user_models):
    with pytest.raises(ConfigError, match=r"agents\[2\].model.*cannot be called.*'depth'"):
        build_agent(f"{MODULE}:mlp", 2, (1, 8, 8), 10, {"depth": 3}, 0)
    with pytest.raises(ConfigError, match=r"config key 'agents\[2\].model_args' gives 'seed'"):
        build_agent(f"{MODULE}:mlp_seeded", 2, (1, 8, 8), 10, {"seed": 3}, 0)


def test_the_config_keeps_encoder_and_head_for_the_cnn():
    def agents(**entry):
        return {"name": "x", "graph": "g.yaml", "agents": [{"classes": [0], **entry}]}

    with pytest.raises(ConfigError, match=r"missing required config key 'agents\[0\].head'"):
        build(ExperimentConfig, agents(encoder=[4]))
    with pytest.raises(ConfigError, match=r"'agents\[0\].encoder' needs at least one width"):
        build(ExperimentConfig, agents(encoder=[], head=[]))
    with pytest.raises(ConfigError, match=r"'agents\[0\].model_args' is for a plug-in model"):
        build(ExperimentConfig, agents(encoder=[4], head=[], model_args={"d": 3}))
    with pytest.raises(ConfigError, match=r"describe the built-in cnn only; give your model"):
        build(ExperimentConfig, agents(model="m:f", encoder=[4]))
    # (a plug-in takes its own dropout, if any, in model_args: this one would be ignored)
    with pytest.raises(ConfigError, match=r"'agents\[0\].dropout' is the built-in cnn's; "):
        build(ExperimentConfig, agents(model="m:f", dropout=0.3))
    cfg = build(ExperimentConfig, agents(model="m:f", model_args={"d": 3}))
    assert cfg.agents[0].dim is None and cfg.agents[0].encoder is None


def test_methods_that_need_equal_dims_read_them_from_the_graph(user_models, tmp_path):
    cfg = _config(tmp_path, [8, 12, 8], algorithm="fedproto")
    with pytest.raises(ConfigError, match=r"fedproto needs every agent .* gives d = \[8, 12\]"):
        experiment.build_graph(cfg, 3)
    cfg = _config(tmp_path, [8, 12, 8], variant="homogeneous")
    with pytest.raises(ConfigError, match=r"homogeneous .* graph .* gives d = \[8, 12\]"):
        experiment.build_graph(cfg, 3)


def test_a_server_plug_in_s_head_and_body_follow_its_head_attribute(user_models):
    model = build_server_model(f"{MODULE}:server_mlp", (1, 28, 28), 10, {"width": 16}, 3)
    assert head_names(model) == ["classifier.weight", "classifier.bias"]
    assert body_names(model) == [f"body.{i}.{w}" for i in (1, 3) for w in ("weight", "bias")]
    assert _same(
        model, build_server_model(f"{MODULE}:server_mlp", (1, 28, 28), 10, {"width": 16}, 3)
    )
    runner = _runner(model)
    assert runner.shared.names == body_names(model)
    assert runner.private == ["classifier.weight", "classifier.bias"]


def test_a_server_plug_in_s_dropout_draws_from_seeded_generators(user_models):
    def trained() -> dict[str, torch.Tensor]:
        model = build_server_model(f"{MODULE}:server_dropout", (1, 28, 28), 10, {}, 3)
        runner = _runner(model)
        assert not runner.head_features_exact  # (its body runs on every batch)
        runner.install(0, runner.shared.flatten(runner.model))
        runner.run_schedule(0, [Phase("head", 1), Phase("body", 1)], round_=0)
        return {n: p.detach().clone() for n, p in runner.model.named_parameters()}

    torch.manual_seed(0)
    a = trained()
    torch.manual_seed(1)  # (the global generator plays no part)
    b = trained()
    assert all(torch.equal(a[n], b[n]) for n in a)


def _runner(model: torch.nn.Module) -> ClientRunner:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(12, 1, 28, 28, generator=g)
    data = ClientData(x, torch.arange(12) % 10, x, torch.arange(12) % 10, (0, 1))
    algorithm = FEDERATED["fedrep"](FederatedConfig())
    return ClientRunner(
        algorithm, model, {0: data}, TrainConfig(batch_size=4), False, 0, torch.device("cpu")
    )


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("no_head", "whose head cannot be found"),
        ("skewed", "forward(x) is not head(representation(x))"),
        ("mlp", "built a MLP without representation()"),
    ],
)
def test_a_faulty_server_model_is_one_line(user_models, factory, said):
    with pytest.raises(ConfigError) as err:
        build_server_model(f"{MODULE}:{factory}", (1, 28, 28), 10, {}, 0)
    msg = str(err.value)
    assert msg.startswith("config key 'federated.model':") and said in msg, msg
    assert "\n" not in msg


def _config(
    tmp_path, dims, model=f"{MODULE}:mlp", args=None, algorithm="sheaf_frl", variant="standard"
):
    """Three agents on digits: two of ``model`` (agent 0 encodes to 8, agent 1 to 12 with
    the default ``args``), the built-in cnn (d = 8) third; a graph of ``dims``."""
    graph = tmp_path / "g3.yaml"
    nodes = [{"id": i, "dim": d} for i, d in enumerate(dims)]
    graph.write_text(yaml.safe_dump({"name": "g3", "nodes": nodes, "edges": [[0, 1], [1, 2]]}))
    plug = [{"d": 8} if args is None else args, {"d": 12} if args is None else args]
    raw = {
        "name": "plug",
        "algorithm": algorithm,
        "graph": str(graph),
        "data": {"dataset": "digits", "shift": 0.5},
        "sheaf": {"variant": variant},
        "agents": [
            {"model": model, "model_args": plug[0], "classes": [0, 1, 2, 3, 4, 5]},
            {"model": model, "model_args": plug[1], "classes": [2, 3, 4, 5, 6, 7]},
            {"encoder": [4, 8], "head": [16], "classes": [0, 1, 2, 3, 8, 9]},
        ],
    }
    return build(ExperimentConfig, raw)


def test_seeded_init_resets_a_plug_in_s_other_layers_from_the_seed():
    # (what sheaf.variant=strict does to every agent's model with its secret)
    from fedsheaf.models.seeded import seeded_init_

    def model() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Embedding(5, 4))

    a, b, c = model(), model(), model()
    before = torch.random.get_rng_state()
    seeded_init_(a, 7), seeded_init_(b, 7), seeded_init_(c, 8)
    assert torch.equal(before, torch.random.get_rng_state())
    assert _same(a, b) and not torch.equal(a[1].weight, c[1].weight)

    class Own(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(2))

    with pytest.raises(TypeError, match="'the model' .*Own: parameters of its own, no reset"):
        seeded_init_(Own(), 0)
