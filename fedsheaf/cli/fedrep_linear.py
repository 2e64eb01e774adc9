"""``fedsheaf fedrep-linear``: FedRep vs FedAvg on the linear model (seed 003)."""

from __future__ import annotations

import argparse

from fedsheaf.theory._io import output_folder, write_json_atomic
from fedsheaf.theory._threads import single_blas_thread
from fedsheaf.theory.fedrep_linear import LinearSettings, run_linear
from fedsheaf.theory.plots import plot_distance_curves

_LINEAR_ARGS = {
    "d": (int, "input dimension"),
    "k": (int, "representation rank"),
    "n": (int, "number of clients"),
    "m": (int, "training samples per client"),
    "rounds": (int, "communication rounds"),
    "participation": (float, "fraction r of clients per round: max(1, floor(r*n))"),
    "noise": (float, "label noise standard deviation"),
    "lr": (float, "FedRep step size on B"),
    "local_steps": (int, "FedRep gradient steps on B per round"),
    "fedavg_lr": (float, "FedAvg step size"),
    "fedavg_local_steps": (int, "FedAvg local steps per round"),
    "m_test": (int, "test samples per client"),
    "seed": (int, "random seed"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``fedsheaf fedrep-linear`` arguments (defaults: :class:`LinearSettings`)."""
    parser.description = (
        "FedRep against FedAvg on the linear low-rank model of seed 003 (y = xᵀ B* w*_i + "
        "noise): the distance of the learned representation to B* round by round and the "
        "final test MSE, printed and written (JSON + PNG) under --out."
    )
    defaults = LinearSettings()
    for name, (kind, text) in _LINEAR_ARGS.items():
        default = getattr(defaults, name)
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=kind, default=default, help=f"{text} ({default})"
        )
    parser.add_argument(
        "--out", default="runs/fedrep_linear", help="output folder (default runs/fedrep_linear)"
    )


def run(args: argparse.Namespace) -> int:
    """Run FedRep vs FedAvg on the linear model; print a table, write JSON and a PNG."""
    settings = LinearSettings(**{name: getattr(args, name) for name in _LINEAR_ARGS})
    out = output_folder(args.out)
    with single_blas_thread():
        res = run_linear(settings)
    rep, avg = res["dist_fedrep"], res["dist_fedavg"]
    print(
        f"FedRep vs FedAvg, linear model d={settings.d} k={settings.k} n={settings.n} "
        f"m={settings.m} noise={settings.noise:g}: principal-angle distance to B*"
    )
    print(f"{'round':>5}  {'FedRep':>10}  {'FedAvg':>10}")
    step = max(1, settings.rounds // 10)
    for t in sorted(set(range(0, settings.rounds + 1, step)) | {settings.rounds}):
        print(f"{t:>5}  {rep[t]:>10.3e}  {avg[t]:>10.3e}")
    print(
        f"final test MSE: FedRep {res['test_mse_fedrep']:.4g}   FedAvg "
        f"{res['test_mse_fedavg']:.4g}   (noise floor {res['noise_floor']:.3g})"
    )
    json_path = write_json_atomic(out / "fedrep_linear.json", res)
    png_path = plot_distance_curves(
        out / "fedrep_linear.png",
        {"FedRep": rep, "FedAvg": avg},
        ylabel=r"dist$(\hat B, B^*)$",
        title=f"d={settings.d}, k={settings.k}, n={settings.n}, m={settings.m}",
    )
    print(f"\nwrote {json_path} and {png_path}")
    return 0
