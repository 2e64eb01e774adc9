"""Figures of the theory toolkit.

Figures are built as bare ``matplotlib.figure.Figure`` objects drawn by the Agg canvas,
so no display and no global pyplot state (or backend switch) is involved.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fedsheaf.theory._io import save_figure_atomic
from fedsheaf.theory.psd import sqrtm_psd

__all__ = ["ellipse_points", "plot_gram_ellipses", "plot_distance_curves", "snapshot_rounds"]


_CLIENT_COLOURS = ("tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:olive", "tab:cyan")


def _figure(size: tuple[float, float]) -> tuple[Figure, Axes]:
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def ellipse_points(G: np.ndarray, n: int = 200) -> np.ndarray:
    """Points ``G^{1/2} u`` for unit vectors ``u`` (2×2 ``G``), shape (2, n)."""
    t = np.linspace(0.0, 2.0 * np.pi, n)
    return sqrtm_psd(G) @ np.vstack([np.cos(t), np.sin(t)])


def snapshot_rounds(rounds: int, k: int = 4) -> list[int]:
    """Rounds to draw: 0, 1, 2, … and the last one (at most ``k``)."""
    first = list(range(min(k - 1, rounds + 1)))
    return sorted(set(first + [rounds]))


def plot_gram_ellipses(
    path: str | Path,
    client_grams: np.ndarray,
    G_star: np.ndarray,
    G_cen: np.ndarray,
    grams: np.ndarray,
    rounds: Sequence[int],
    title: str = "",
) -> Path:
    """Ellipses ``{G^{1/2}u : ‖u‖ = 1}`` of the client Grams, ``G_⋆``, ``G_cen`` and ``G_t``.

    Only the leading 2×2 block is drawn when ``C > 2``; for ``C = 1`` each Gram ``g`` is
    the interval ``[−√g, √g]`` (the one-dimensional ellipse), one row per matrix.
    """
    if np.shape(G_star)[0] == 1:
        return _plot_gram_intervals(path, client_grams, G_star, G_cen, grams, rounds, title)
    fig, ax = _figure((7.0, 5.5))
    for m, Gm in enumerate(client_grams):
        x, y = ellipse_points(Gm[:2, :2])
        colour = _CLIENT_COLOURS[m % len(_CLIENT_COLOURS)]
        ax.plot(x, y, ls=":", lw=1.3, color=colour, label=f"client {m + 1} $G_m$")
    shades = matplotlib.colormaps["Blues"](np.linspace(0.35, 0.95, len(rounds)))
    for colour, t in zip(shades, rounds, strict=True):
        x, y = ellipse_points(grams[t][:2, :2])
        ax.plot(x, y, color=colour, lw=1.6, label=f"$G_t$, t={t}")
    for G, style, label in ((G_star, "k--", r"$G_\star$"), (G_cen, "r--", r"$G_{cen}$")):
        x, y = ellipse_points(G[:2, :2])
        ax.plot(x, y, style, lw=1.8, label=label, zorder=5)
    ax.set_aspect("equal")
    ax.axhline(0, color="0.85", lw=0.5, zorder=0)
    ax.axvline(0, color="0.85", lw=0.5, zorder=0)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save_figure_atomic(fig, path, dpi=120)


def _plot_gram_intervals(
    path: str | Path,
    client_grams: np.ndarray,
    G_star: np.ndarray,
    G_cen: np.ndarray,
    grams: np.ndarray,
    rounds: Sequence[int],
    title: str,
) -> Path:
    """:func:`plot_gram_ellipses` for ``C = 1``: intervals ``[−√g, √g]``, one per row."""
    shades = matplotlib.colormaps["Blues"](np.linspace(0.35, 0.95, len(rounds)))
    rows: list[tuple[float, str, str, str]] = [
        (float(G[0, 0]), _CLIENT_COLOURS[m % len(_CLIENT_COLOURS)], ":", f"client {m + 1} $G_m$")
        for m, G in enumerate(client_grams)
    ]
    rows += [
        (float(grams[t][0, 0]), colour, "-", f"$G_t$, t={t}")
        for colour, t in zip(shades, rounds, strict=True)
    ]
    rows += [
        (float(G_star[0, 0]), "k", "--", r"$G_\star$"),
        (float(G_cen[0, 0]), "r", "--", r"$G_{cen}$"),
    ]
    fig, ax = _figure((7.0, 0.9 + 0.35 * len(rows)))
    for y, (g, colour, style, label) in enumerate(reversed(rows)):
        half = float(np.sqrt(max(g, 0.0)))
        ax.plot([-half, half], [y, y], ls=style, lw=2.0, color=colour, marker="|", label=label)
    ax.set_yticks(range(len(rows)), [label for *_, label in reversed(rows)], fontsize=8)
    ax.axvline(0, color="0.85", lw=0.5, zorder=0)
    ax.set_xlabel(r"$\pm\sqrt{G}$ (C = 1: the ellipse is an interval)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save_figure_atomic(fig, path, dpi=120)


def plot_distance_curves(
    path: str | Path,
    curves: dict[str, Sequence[float]],
    ylabel: str,
    title: str = "",
) -> Path:
    """Curves against round on a log y axis (non-positive values are clipped to 1e-300)."""
    fig, ax = _figure((6.0, 4.0))
    for label, ys in curves.items():
        ys = np.maximum(np.asarray(ys, dtype=float), 1e-300)
        ax.semilogy(np.arange(len(ys)), ys, lw=1.6, label=label)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save_figure_atomic(fig, path, dpi=120)
