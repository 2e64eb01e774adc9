"""Server-side aggregators: each built-in against a closed form on a tiny instance (3 or 4
clients, 4 parameters), their checkpointed state, FedProx's client term, and the registry
that finds a user's aggregator (inline "module:callable" or an installed entry point)."""

from __future__ import annotations

import io
import sys
import textwrap

import numpy as np
import pytest
import torch
import yaml

from fedsheaf.algorithms.federated import FEDERATED
from fedsheaf.algorithms.federated.aggregators import (
    AGGREGATORS,
    FedAdagrad,
    FedAdam,
    FedAvgAggregator,
    FedYogi,
    Median,
    TrimmedMean,
    aggregator_state,
    load_aggregator_state,
    make_aggregator,
)
from fedsheaf.algorithms.federated.protocol import average
from fedsheaf.algorithms.federated.setup import ClientData
from fedsheaf.algorithms.federated.trainer import ClientRunner
from fedsheaf.cli import main as cli
from fedsheaf.config.sections import FederatedConfig, TrainConfig, load_config
from fedsheaf.models.fedrep_cnn import build_fedrep_cnn
from fedsheaf.util.errors import CheckpointError, ConfigError

torch.set_num_threads(1)

# the tiny instance: 3 clients, 4 parameters, sizes 1, 2, 1 (all values exact in binary)
X0 = np.array([0.0, 1.0, -1.0, 3.0])
UPDATES = [
    np.array([1.0, 1.0, 0.0, 2.0]),
    np.array([2.0, 3.0, -1.0, 0.0]),
    np.array([3.0, 2.0, -2.0, 4.0]),
]
COUNTS = [1, 2, 1]
MEAN = np.array([2.0, 2.0, -1.0, 2.0])
WEIGHTED_MEAN = np.array([2.0, 2.25, -1.0, 1.5])


def _f32(rows: list[np.ndarray]) -> list[np.ndarray]:
    return [r.astype(np.float32) for r in rows]


# ---- FedAvg -----------------------------------------------------------------------------
def test_fedavg_unweighted_and_weighted_closed_form():
    plain = FedAvgAggregator(weighted=False).aggregate(X0, UPDATES, COUNTS, 1)
    weighted = FedAvgAggregator(weighted=True).aggregate(X0, UPDATES, COUNTS, 1)
    np.testing.assert_array_equal(plain, MEAN)
    np.testing.assert_array_equal(weighted, WEIGHTED_MEAN)
    assert plain.dtype == np.float32  # what the server broadcasts


@pytest.mark.parametrize("weighted", [False, True])
def test_fedavg_is_todays_average_bit_for_bit(weighted):
    """The default aggregator sums exactly as the server always has (protocol.average)."""
    g = np.random.default_rng(0)
    rows = g.standard_normal((7, 1000)).astype(np.float32)
    sizes = g.integers(1, 600, size=7)
    today = average(rows, sizes.astype(np.float64) if weighted else None)
    now = FedAvgAggregator(weighted).aggregate(rows[0], list(rows), [int(n) for n in sizes], 3)
    assert now.tobytes() == today.tobytes()


def test_the_default_aggregator_follows_federated_weighted():
    assert make_aggregator(FederatedConfig()).weighted is True  # today's default
    agg = make_aggregator(FederatedConfig(weighted=False))
    assert type(agg) is FedAvgAggregator and agg.weighted is False
    # an explicit argument wins over federated.weighted
    agg = make_aggregator(
        FederatedConfig(aggregator="fedadam", aggregator_args={"weighted": False})
    )
    assert agg.weighted is False


# ---- FedAdagrad / FedAdam / FedYogi (Reddi et al., 2021, Algorithm 2) --------------------
def _constant_drift(agg, rounds: int, d: np.ndarray) -> np.ndarray:
    """Run ``rounds`` rounds in which the clients' mean is always ``x_t + d`` (Δ_t = d);
    the returned x_T."""
    x = X0.copy()
    noise = [np.array([0.5, -0.25, 0.0, 1.0]), np.array([-1.0, 0.5, 0.25, -2.0])]
    noise.append(-noise[0] - noise[1])  # the three uploads average to x_t + d
    for t in range(rounds):
        x = agg.aggregate(x, [x + d + e for e in noise], COUNTS, t + 1)
    return x


D = np.array([0.5, -2.0, 0.0, 1.0])
ETA, B1, B2, TAU = 0.1, 0.9, 0.99, 1e-3


@pytest.mark.parametrize("name", ["fedadagrad", "fedadam", "fedyogi"])
def test_server_optimisers_closed_form_under_a_constant_pseudo_gradient(name):
    """With Δ_t = d every round, m_t = (1 − β1^{t+1}) d and v_t has a closed form:
    Adagrad τ² + (t+1) d², Adam β2^{t+1} τ² + (1 − β2^{t+1}) d², Yogi (v_{t−1} < d² in
    these rounds) τ² + (t+1)(1 − β2) d²; so x_T = x_0 + η Σ_t m_t / (√v_t + τ)."""
    T = 3
    args = {"eta": ETA, "beta1": B1, "tau": TAU, "weighted": False}
    if name != "fedadagrad":
        args["beta2"] = B2
    agg = make_aggregator(FederatedConfig(aggregator=name, aggregator_args=args))
    x = _constant_drift(agg, T, D)
    expected = X0.copy()
    for t in range(T):
        m = (1 - B1 ** (t + 1)) * D
        v = {
            "fedadagrad": TAU**2 + (t + 1) * D**2,
            "fedadam": B2 ** (t + 1) * TAU**2 + (1 - B2 ** (t + 1)) * D**2,
            "fedyogi": TAU**2 + (t + 1) * (1 - B2) * D**2,
        }[name]
        expected = expected + ETA * m / (np.sqrt(v) + TAU)
    np.testing.assert_allclose(x, expected, rtol=1e-12, atol=1e-12)
    assert abs(x[2] - X0[2]) < 1e-12  # no drift, no move
    moved = [0, 1, 3]
    assert np.all(np.sign(x - X0)[moved] == np.sign(D)[moved])


def test_server_optimiser_defaults_are_the_papers():
    adam, yogi, adagrad = FedAdam(), FedYogi(), FedAdagrad()
    assert (adam.beta1, adam.beta2, adam.tau, adam.eta) == (0.9, 0.99, 1e-3, 1e-2)
    assert (yogi.beta1, yogi.beta2) == (0.9, 0.99)
    assert adagrad.beta1 == 0.0  # Adagrad without momentum, as the paper analyses it


def test_fedyogi_second_moment_shrinks_additively_when_it_exceeds_delta_squared():
    """v_t = v − (1 − β2) Δ² sign(v − Δ²): grows by (1 − β2) Δ² while Δ² > v, shrinks by
    (1 − β2) Δ² once Δ² < v (Adam would shrink it by a factor)."""
    yogi = FedYogi(eta=ETA, beta1=0.0, beta2=B2, tau=TAU, weighted=False)
    big, small = np.full(4, 10.0), np.full(4, 0.1)
    x1 = yogi.aggregate(X0, [X0 + big] * 3, COUNTS, 1)
    v1 = yogi.state_dict()["v"]
    np.testing.assert_allclose(v1, TAU**2 + (1 - B2) * 100.0, rtol=1e-14)
    yogi.aggregate(x1, [x1 + small] * 3, COUNTS, 2)
    np.testing.assert_allclose(yogi.state_dict()["v"], v1 - (1 - B2) * 0.01, rtol=1e-14)


def test_server_optimiser_pseudo_gradient_uses_the_sample_weights():
    """One FedAdagrad step from m = 0, v = τ² (β1 = 0): x + η Δ / (√(τ² + Δ²) + τ), with Δ
    the weighted (or plain) mean minus x."""
    for weighted, mean in ((True, WEIGHTED_MEAN), (False, MEAN)):
        agg = FedAdagrad(eta=ETA, tau=TAU, weighted=weighted)
        delta = mean - X0
        expected = X0 + ETA * delta / (np.sqrt(TAU**2 + delta**2) + TAU)
        np.testing.assert_allclose(agg.aggregate(X0, UPDATES, COUNTS, 1), expected, rtol=1e-14)


@pytest.mark.parametrize(
    "args,message",
    [
        ({"eta": 0}, "eta must be a number > 0, got 0"),
        ({"tau": -1.0}, "tau must be a number > 0"),
        ({"beta1": 1.0}, "beta1 must be a number in [0, 1), got 1.0"),
        ({"beta2": "x"}, "beta2 must be a number in [0, 1)"),
    ],
)
def test_bad_server_optimiser_arguments_are_one_config_error(args, message):
    with pytest.raises(ConfigError) as err:
        make_aggregator(FederatedConfig(aggregator="fedadam", aggregator_args=args))
    text = str(err.value)
    assert text.startswith("config key 'federated.aggregator': aggregator 'fedadam' refused ")
    assert message in text and "\n" not in text


def test_server_optimiser_state_survives_a_checkpoint_bitwise(tmp_path):
    """FedAdam for 2 rounds, saved as the server saves it (torch.save, loaded with
    weights_only), restored into a fresh FedAdam: rounds 3 and 4 are bitwise the same as
    without the interruption."""
    rng = np.random.default_rng(1)
    rounds = [_f32(list(rng.standard_normal((3, 4)))) for _ in range(4)]

    def step(agg, x, t):
        out = agg.aggregate(x, [x + u for u in rounds[t]], COUNTS, t + 1)
        return out.astype(np.float32)  # what the server keeps and broadcasts

    straight, x = FedAdam(eta=0.05, weighted=True), X0.astype(np.float32)
    xs = []
    for t in range(4):
        x = step(straight, x, t)
        xs.append(x)
    first, y = FedAdam(eta=0.05, weighted=True), X0.astype(np.float32)
    for t in range(2):
        y = step(first, y, t)
    torch.save({"aggregator": aggregator_state(first)}, tmp_path / "rank-0.pt")
    saved = torch.load(tmp_path / "rank-0.pt", weights_only=True)["aggregator"]
    assert sorted(saved) == ["m", "v"] and saved["m"].dtype == torch.float64
    resumed = FedAdam(eta=0.05, weighted=True)
    load_aggregator_state(resumed, saved)
    for t in (2, 3):
        y = step(resumed, y, t)
        assert y.tobytes() == xs[t].tobytes()


def test_state_of_another_aggregator_is_refused():
    with pytest.raises(CheckpointError, match="holds aggregator state"):
        load_aggregator_state(FedAvgAggregator(), {"m": np.zeros(4), "v": np.zeros(4)})
    with pytest.raises(CheckpointError, match="expected m and v"):
        load_aggregator_state(FedAdam(), {"momentum": np.zeros(4)})
    fresh = FedAdam()
    load_aggregator_state(fresh, {})  # a checkpoint written before the first round
    assert fresh.state_dict() == {}


# ---- robust aggregators ----------------------------------------------------------------
def test_coordinate_wise_median_closed_form():
    np.testing.assert_array_equal(Median().aggregate(X0, UPDATES, COUNTS, 1), [2.0, 2.0, -1.0, 2.0])
    four = [*UPDATES, np.array([1e6, -1e6, 7.0, 3.0])]  # one wild client
    np.testing.assert_array_equal(
        Median().aggregate(X0, four, [1, 1, 1, 1], 1), [2.5, 1.5, -0.5, 2.5]
    )


def test_trimmed_mean_closed_form():
    four = [*UPDATES, np.array([1e6, -1e6, 7.0, 3.0])]
    # β = 0.25 of 4: drop the smallest and the largest value per coordinate
    np.testing.assert_array_equal(
        TrimmedMean(beta=0.25).aggregate(X0, four, [1] * 4, 1), [2.5, 1.5, -0.5, 2.5]
    )
    # β = 0: the plain (unweighted, whatever the counts) mean
    np.testing.assert_array_equal(TrimmedMean(beta=0.0).aggregate(X0, UPDATES, COUNTS, 1), MEAN)
    five = [*four, np.array([-3.0, 0.0, 1.0, 1.0])]  # β = 0.2 of 5: one from each end
    np.testing.assert_allclose(
        TrimmedMean(beta=0.2).aggregate(X0, five, [1] * 5, 1),
        [2.0, 1.0, 0.0, 2.0],  # means of (1,2,3), (0,1,2)... per coordinate, computed by hand
        rtol=1e-15,
    )
    with pytest.raises(ConfigError, match=r"beta must be a number in \[0, 0.5\), got 0.5"):
        make_aggregator(FederatedConfig(aggregator="trimmed_mean", aggregator_args={"beta": 0.5}))


# ---- FedProx: the client's proximal term -------------------------------------------------
class _Quadratic(ClientRunner):
    """A client whose own loss is ½‖w‖² over the trained parameters (data ignored)."""

    caches_head_features = False

    def batch_loss(self, client, forward, xb, yb):
        return 0.5 * sum((p**2).sum() for p in self.model.parameters() if p.requires_grad)


def _client(n: int = 24) -> ClientData:
    g = torch.Generator().manual_seed(0)
    return ClientData(
        torch.randn(n, 1, 16, 16, generator=g),
        torch.randint(2, (n,), generator=g),
        torch.randn(4, 1, 16, 16, generator=g),
        torch.randint(2, (4,), generator=g),
        (0, 1),
    )


@pytest.mark.parametrize("mu", [0.0, 0.5, 3.0])
def test_fedprox_local_sgd_closed_form(mu):
    """Plain SGD (η, no momentum or decay) on ½‖w‖² + (μ/2)‖w − w_g‖² from w_g: each step
    w ← w − η((1+μ) w − μ w_g), so after K steps w_K = w* + (1 − η(1+μ))^K (w_g − w*) with
    w* = μ w_g / (1+μ)."""
    lr, batch, n = 0.1, 8, 24
    train = TrainConfig(batch_size=batch, lr=lr, momentum=0.0, weight_decay=0.0, clip=None)
    algo = FEDERATED["fedavg"](FederatedConfig(local_epochs=2, prox_mu=mu))
    runner = _Quadratic(
        algo,
        build_fedrep_cnn(1, 16, 10, seed=3),
        {0: _client(n)},
        train,
        False,
        5,
        torch.device("cpu"),
    )
    runner.prox_mu = mu
    w_g = runner.shared.flatten(runner.model).astype(np.float64) * 10.0
    new, loss = runner.local_update(0, w_g.astype(np.float32), 0)
    steps = 2 * (n // batch)
    star = mu * w_g / (1 + mu)
    expected = star + (1 - lr * (1 + mu)) ** steps * (w_g - star)
    np.testing.assert_allclose(new, expected, rtol=2e-5, atol=1e-7)
    assert np.isfinite(loss)


def test_fedprox_anchors_only_the_shared_parameters():
    """FedRep shares the body: its private head trains without a proximal pull."""
    train = TrainConfig(batch_size=8, lr=0.1, momentum=0.0, weight_decay=0.0, clip=None)
    heads = []
    for mu in (0.0, 5.0):
        algo = FEDERATED["fedrep"](FederatedConfig(head_epochs=1, body_epochs=0))
        runner = _Quadratic(
            algo,
            build_fedrep_cnn(1, 16, 10, seed=3),
            {0: _client()},
            train,
            False,
            5,
            torch.device("cpu"),
        )
        runner.prox_mu = mu
        runner.local_update(0, runner.shared.flatten(runner.model), 0)
        heads.append(runner.private_rows([0]))
    assert heads[0].tobytes() == heads[1].tobytes()


# ---- the registry: built-ins, inline "module:callable", installed plug-ins ----------------
USER_MODULE = "fedsheaf_test_useragg"


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """A user's module on sys.path: aggregators right and wrong."""
    (tmp_path / f"{USER_MODULE}.py").write_text(
        textwrap.dedent(
            """
            import numpy as np

            class Shrink:
                '''Half way (``factor``) from the broadcast to the plain mean; no state.'''

                def __init__(self, factor=0.5):
                    self.factor = factor

                def aggregate(self, global_params, updates, counts, round_):
                    return global_params + self.factor * (np.mean(updates, 0) - global_params)

            def make_shrink(factor):
                return Shrink(factor)

            class TwoArgs:
                def aggregate(self, global_params, updates):
                    return global_params

            def refuses(**kwargs):
                raise ValueError("factor must be below 1")

            NOT_CALLABLE = 5
            """
        )
    )
    (tmp_path / "fedsheaf_test_boom.py").write_text("raise RuntimeError('needs a GPU')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in (USER_MODULE, "fedsheaf_test_boom"):
        sys.modules.pop(name, None)


def _make(ref: str, **args):
    return make_aggregator(FederatedConfig(aggregator=ref, aggregator_args=args))


def test_every_builtin_is_registered_by_name():
    assert AGGREGATORS.builtin == [
        "fedavg",
        "fedadagrad",
        "fedadam",
        "fedyogi",
        "median",
        "trimmed_mean",
    ]
    assert type(_make("median")) is Median


def test_an_inline_user_aggregator_is_built_with_its_arguments(user_code):
    agg = _make(f"{USER_MODULE}:Shrink", factor=0.25)
    np.testing.assert_allclose(agg.aggregate(X0, UPDATES, COUNTS, 1), X0 + 0.25 * (MEAN - X0))
    assert _make(f"{USER_MODULE}:make_shrink", factor=1.0).factor == 1.0
    assert aggregator_state(agg) == {}  # no state_dict(): no state


@pytest.mark.parametrize(
    "ref,args,message",
    [
        ("fedadm", {}, "aggregator 'fedadm' is unknown (did you mean 'fedadam'?); built-in: "),
        ("nowhere_pkg.mod:make", {}, "does not import: no module named 'nowhere_pkg'"),
        ("fedsheaf_test_boom:make", {}, "does not import: RuntimeError: needs a GPU"),
        (f"{USER_MODULE}:Nothing", {}, f"does not exist: {USER_MODULE} has no 'Nothing'"),
        (f"{USER_MODULE}:NOT_CALLABLE", {}, "is not callable (its type: int)"),
        (f"{USER_MODULE}", {}, "is unknown"),
        (f"{USER_MODULE}:", {}, "must look like 'package.module:callable'"),
        (
            f"{USER_MODULE}:Shrink",
            {"fator": 2},
            "does not take federated.aggregator_args {fator: 2}: got an unexpected keyword",
        ),
        (f"{USER_MODULE}:make_shrink", {}, "missing a required argument: 'factor'"),
        (f"{USER_MODULE}:refuses", {"factor": 3}, "refused federated.aggregator_args"),
        (f"{USER_MODULE}:TwoArgs", {}, "aggregate() cannot be called as aggregate("),
        (f"{USER_MODULE}:np", {}, "is not callable"),
        ("os.path:basename", {}, "does not take federated.aggregator_args {}"),
    ],
)
def test_what_does_not_resolve_is_one_config_error_naming_the_key(user_code, ref, args, message):
    with pytest.raises(ConfigError) as err:
        _make(ref, **args)
    text = str(err.value)
    assert text.startswith("config key 'federated.aggregator': ") and "\n" not in text
    assert message in text, text


def test_an_installed_plugin_is_found_by_its_entry_point(user_code, tmp_path, monkeypatch):
    """A distribution that declares entry points in group fedsheaf.aggregators (its
    dist-info on sys.path, as pip would install it)."""
    dist = tmp_path / "site" / "fakeplug-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[fedsheaf.aggregators]\n"
        f"shrinkplug = {USER_MODULE}:Shrink\n"
        "brokenplug = fedsheaf_test_absent:Thing\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert {"shrinkplug", "brokenplug"} <= set(AGGREGATORS.installed())
    assert _make("shrinkplug", factor=0.75).factor == 0.75
    with pytest.raises(
        ConfigError,
        match="'brokenplug' .entry point 'fedsheaf_test_absent:Thing'. "
        "cannot be loaded: ModuleNotFoundError",
    ):
        _make("brokenplug")
    with pytest.raises(
        ConfigError,
        match="installed plug-ins .entry-point group "
        "fedsheaf.aggregators.: brokenplug, shrinkplug;",
    ):
        _make("nope")


# ---- the config keys ----------------------------------------------------------------------
def test_aggregator_keys_read_from_file_and_overrides(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "name": "agg",
                "algorithm": "fedavg",
                "federated": {"aggregator": "fedadam", "aggregator_args": {"eta": 0.5}},
            }
        )
    )
    fc = load_config(cfg, ["federated.aggregator_args.tau=1e-4", "prox_mu=0.01"]).federated
    assert (fc.aggregator, fc.aggregator_args, fc.prox_mu) == (
        "fedadam",
        {"eta": 0.5, "tau": 1e-4},
        0.01,
    )
    with pytest.raises(ConfigError, match="'federated.aggregator_args' must be a mapping"):
        load_config(cfg, ["federated.aggregator_args=3"])
    with pytest.raises(ConfigError, match="'federated.prox_mu' must be >= 0.0"):
        load_config(cfg, ["federated.prox_mu=-1"])
    warned = load_config(cfg, ["algorithm=local"]).ignored_settings()
    assert any("federated.aggregator" in w and "Local shares nothing" in w for w in warned)


def test_fedsheaf_check_refuses_an_aggregator_that_does_not_resolve(tmp_path, capsys):
    cfg = tmp_path / "h.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "name": "agg",
                "algorithm": "head_fedavg",
                "federated": {"clients": 4, "rounds": 2, "fraction": 0.5},
                "train": {"weight_decay": 0.0},
                "head": {"data": "diabetes3", "backbone": [8], "features": 4},
                "output": {"dir": str(tmp_path / "runs")},
            }
        )
    )
    assert cli.main(["check", "-n", "3", str(cfg), "federated.aggregator=fedadam"]) == 0
    capsys.readouterr()
    code = cli.main(["check", "-n", "3", str(cfg), "federated.aggregator=nowhere_pkg:Agg"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("fedsheaf: error: ") and err.count("\n") == 1
    assert "config key 'federated.aggregator': aggregator 'nowhere_pkg:Agg' does not import" in err
    assert not (tmp_path / "runs").exists()


def test_the_keys_are_listed():
    out = io.StringIO()
    from fedsheaf.cli.keys import keys

    assert keys("federated.aggregator", out) == 0
    text = out.getvalue()
    assert "federated.aggregator_args" in text and "fedsheaf.aggregators" in text
