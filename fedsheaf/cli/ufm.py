"""CLI glue for ``fedsheaf ufm`` (and ``fedsheaf fedrep-linear``, see below).

``configure(parser)`` adds the arguments; ``run(args)`` executes and returns an exit
status. User errors propagate as :class:`fedsheaf.util.errors.FedsheafError`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from fedsheaf.theory._io import output_folder, write_json_atomic
from fedsheaf.theory._threads import single_blas_thread
from fedsheaf.theory.instances import load_ufm_config
from fedsheaf.theory.plots import plot_gram_ellipses, snapshot_rounds
from fedsheaf.theory.simulate import MODES, SimResult, SimSettings, simulate
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.log import get_logger

logger = get_logger(__name__)

__all__ = ["configure", "run", "DEFAULT_UFM_CONFIG"]

DEFAULT_UFM_CONFIG = "configs/ufm_fixed.yaml"
_REPO_ROOT = Path(__file__).resolve().parents[2]


#: The ``fedsheaf ufm`` options that apply to one mode only.
_MODE_OPTIONS = {"rho": "proximal", "local_steps": "gd", "lr": "gd"}


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``fedsheaf ufm`` arguments to ``parser``.

    Options left unset fall back to the ``simulation:`` block of the config.
    """
    parser.description = (
        "Simulate head-only FedAvg in the unconstrained-feature model (UFM): each round "
        "every client starts from the broadcast head and returns a local one (mode exact: "
        "its selected optimal head; proximal: a proximal solve with weight --rho; gd: "
        "--local-steps gradient steps of size --lr; joint: centralized training), and the "
        "server averages them. Prints each round's error to the federated and centralized "
        "fixed points and writes ufm.json and ufm_ellipses.png to --out. Options left "
        "unset come from the config's simulation: block, else from the defaults shown."
    )
    d = SimSettings()
    parser.add_argument(
        "config",
        nargs="?",
        metavar="CONFIG",
        help=f"UFM instance YAML (default: {DEFAULT_UFM_CONFIG})",
    )
    # the option of earlier versions, kept working (with a warning) and out of --help
    parser.add_argument("--config", dest="config_option", help=argparse.SUPPRESS)
    parser.add_argument(
        "--rounds", type=int, default=None, help=f"communication rounds (default: {d.rounds})"
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help=f"local behaviour of clients (default: {d.mode})",
    )
    parser.add_argument(
        "--rho",
        type=float,
        default=None,
        help=f"proximal weight, proximal mode (default: {d.rho:g})",
    )
    parser.add_argument(
        "--gamma",
        type=float,
        default=None,
        help=f"moment-correction scale in [0, 1] (default: {d.gamma:g})",
    )
    parser.add_argument(
        "--local-steps",
        type=int,
        default=None,
        help=f"E, local steps of the gd mode (default: {d.local_steps})",
    )
    parser.add_argument(
        "--lr", type=float, default=None, help=f"step size of the gd mode (default: {d.lr:g})"
    )
    parser.add_argument(
        "--barycenter-tol",
        type=float,
        default=None,
        help="relative step at which the BW barycenter iterations stop; loosen it for "
        f"client Grams with extreme condition numbers (default: {d.barycenter_tol:g})",
    )
    parser.add_argument(
        "--barycenter-max-iter",
        type=int,
        default=None,
        help=f"most BW barycenter iterations (default: {d.barycenter_max_iter})",
    )
    parser.add_argument("--out", default="runs/ufm", help="output folder (default: %(default)s)")


def config_argument(args: argparse.Namespace) -> str:
    """The CONFIG ``args`` name: positional, or (deprecated, said on stderr) ``--config``."""
    option = getattr(args, "config_option", None)
    if option is None:
        return args.config or DEFAULT_UFM_CONFIG
    if args.config is not None:
        raise ConfigError(f"ufm: the config is given twice ({args.config} and --config {option})")
    logger.warning(
        f"fedsheaf ufm: warning: --config is deprecated; give the config first: "
        f"fedsheaf ufm {option}"
    )
    return str(option)


def _config_path(path: str) -> Path:
    p = Path(path)
    if not p.exists() and path == DEFAULT_UFM_CONFIG and (_REPO_ROOT / path).exists():
        return _REPO_ROOT / path
    return p


def _format_table(res: SimResult) -> str:
    s = res.settings
    tr = res.gap.traces
    head = [
        f"UFM simulation: mode={s.mode} rounds={s.rounds} gamma={s.gamma:g}"
        + (f" rho={s.rho:g}" if s.mode == "proximal" else "")
        + (f" E={s.local_steps} lr={s.lr:g}" if s.mode == "gd" else ""),
        f"gap G_cen - G_star:  Tr M_mu = {tr['M_mu']:.6g}   Tr M_Sigma = {tr['M_Sigma']:.6g}"
        f"   Tr M_A = {tr['M_A']:.6g}",
        f"relative gap ||G_cen - G_star||/||G_cen|| = {res.gap.relative_gap:.6g}",
        "errors are ||G_t - G_ref||_F/||G_ref||_F; pred = BW barycenter of the corrected "
        "client optima (G_star at gamma=0, G_cen at gamma=1)",
        "",
        f"{'round':>5}  {'err to G_star':>13}  {'err to G_cen':>13}  {'err to pred':>13}",
    ]
    rows = [
        f"{t:>5}  {res.rel_err_star[t]:>13.4e}  {res.rel_err_cen[t]:>13.4e}"
        f"  {res.rel_err_pred[t]:>13.4e}"
        for t in range(len(res.grams))
    ]
    return "\n".join(head + rows)


def run(args: argparse.Namespace) -> int:
    """Run the UFM simulation; print a table, write ``ufm.json`` and ``ufm_ellipses.png``."""
    cfg = load_ufm_config(_config_path(config_argument(args)))
    overrides = {
        "rounds": args.rounds,
        "mode": args.mode,
        "rho": args.rho,
        "gamma": args.gamma,
        "local_steps": getattr(args, "local_steps", None),
        "lr": getattr(args, "lr", None),
        "barycenter_tol": getattr(args, "barycenter_tol", None),
        "barycenter_max_iter": getattr(args, "barycenter_max_iter", None),
    }
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        settings = dataclasses.replace(cfg.settings, **given)
    except ConfigError as exc:  # name the option the user typed, not the config key
        msg = str(exc)
        for key in given:
            msg = msg.replace(f"simulation.{key} ", f"--{key.replace('_', '-')} ")
        raise ConfigError(f"ufm: {msg}" if msg != str(exc) else msg) from None
    for key, mode in _MODE_OPTIONS.items():
        if overrides[key] is not None and settings.mode != mode:
            raise ConfigError(
                f"ufm: option --{key.replace('_', '-')} applies only to --mode {mode}, "
                f"not to mode {settings.mode}"
            )
    out = output_folder(args.out)
    with single_blas_thread():
        res = simulate(cfg.instance, cfg.W0, settings)
    print(_format_table(res))
    start, end = res.rel_err_star[0], res.rel_err_star[-1]
    if not np.isfinite(end) or end > 1e3 * max(start, 1.0):
        logger.warning(
            f"ufm: warning: the iteration diverged (error to G_star {start:.3g} at round 0, "
            f"{end:.3g} at the last)"
            + (": lower --lr or --local-steps" if settings.mode == "gd" else "")
        )
    summary = {
        "config": str(cfg.source),
        "instance": cfg.instance.to_dict(),
        "W0": cfg.W0.tolist(),
        **res.to_dict(),
    }
    json_path = write_json_atomic(out / "ufm.json", summary)
    png_path = plot_gram_ellipses(
        out / "ufm_ellipses.png",
        res.client_grams,
        res.gap.G_star,
        res.gap.G_cen,
        res.grams,
        snapshot_rounds(settings.rounds),
        title=f"mode={settings.mode}, gamma={settings.gamma:g}",
    )
    print(f"\nwrote {json_path} and {png_path}")
    return 0


