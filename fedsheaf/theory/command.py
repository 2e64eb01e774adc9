"""CLI glue for ``fedsheaf ufm`` (and ``fedsheaf fedrep-linear``, see below).

``configure(parser)`` adds the arguments; ``run(args)`` executes and returns an exit
status. User errors propagate as :class:`fedsheaf.errors.FedsheafError`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from fedsheaf.theory._io import write_json_atomic
from fedsheaf.theory._threads import single_blas_thread
from fedsheaf.theory.instances import load_ufm_config
from fedsheaf.theory.plots import plot_gram_ellipses, snapshot_rounds
from fedsheaf.theory.simulate import MODES, SimResult, simulate

__all__ = ["configure", "run", "DEFAULT_UFM_CONFIG"]

DEFAULT_UFM_CONFIG = "configs/ufm_fixed.yaml"
_REPO_ROOT = Path(__file__).resolve().parents[2]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``fedsheaf ufm`` arguments to ``parser``.

    Options left unset fall back to the ``simulation:`` block of the config.
    """
    parser.add_argument(
        "--config",
        default=DEFAULT_UFM_CONFIG,
        help=f"UFM instance YAML (default {DEFAULT_UFM_CONFIG})",
    )
    parser.add_argument("--rounds", type=int, default=None, help="communication rounds")
    parser.add_argument("--mode", choices=MODES, default=None, help="local behaviour of clients")
    parser.add_argument("--rho", type=float, default=None, help="proximal weight (proximal)")
    parser.add_argument(
        "--gamma", type=float, default=None, help="moment-correction scale in [0, 1]"
    )
    parser.add_argument("--local-steps", type=int, default=None, help="E of the gd mode")
    parser.add_argument("--lr", type=float, default=None, help="step size of the gd mode")
    parser.add_argument("--out", default="runs/ufm", help="output folder (default runs/ufm)")


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
    cfg = load_ufm_config(_config_path(args.config))
    overrides = {
        "rounds": args.rounds,
        "mode": args.mode,
        "rho": args.rho,
        "gamma": args.gamma,
        "local_steps": getattr(args, "local_steps", None),
        "lr": getattr(args, "lr", None),
    }
    settings = dataclasses.replace(
        cfg.settings, **{k: v for k, v in overrides.items() if v is not None}
    )
    with single_blas_thread():
        res = simulate(cfg.instance, cfg.W0, settings)
    print(_format_table(res))
    out = Path(args.out)
    summary = {"config": str(cfg.source), **res.to_dict()}
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
