"""Load a federated UFM instance and its simulation settings from YAML.

Schema (see ``configs/ufm_fixed.yaml``)::

    lam_H: float            lam_W: float
    clients: list of {mean: [C floats], cov: MATRIX, weight: float > 0 (default 1)}
    init: {gram: MATRIX} or {head: C×P list of rows}       (optional; default G_0 = I)
    simulation: {mode, rounds, rho, gamma, local_steps, lr, prox_start, solver_*}  (optional)

MATRIX is a list of rows or ``{rotation_deg: θ, eigenvalues: [a, b]}`` (2×2 only).
Unknown keys and malformed values raise :class:`ConfigError` naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedsheaf.theory.psd import min_eig, rotated_diag, sqrtm_psd, sym
from fedsheaf.theory.simulate import SimSettings
from fedsheaf.theory.ufm import UFMInstance, client_grams
from fedsheaf.util import yamlio
from fedsheaf.util.errors import ConfigError

__all__ = [
    "UFMConfig",
    "load_ufm_config",
    "parse_ufm_config",
    "load_instance",
    "random_orthogonal",
    "random_instance",
]

_TOP = {"lam_H", "lam_W", "clients", "init", "simulation"}
_CLIENT = {"mean", "cov", "weight"}
_INIT = {"gram", "head"}
_ROT = {"rotation_deg", "eigenvalues"}


@dataclass(frozen=True, eq=False)
class UFMConfig:
    """A parsed UFM config: the instance, the initial head ``W0`` and simulation settings."""

    instance: UFMInstance
    W0: np.ndarray
    settings: SimSettings
    source: str


def _mapping(obj: Any, where: str, allowed: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(obj).__name__}")
    for key in obj:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r} (allowed: {sorted(allowed)})")
    for key in sorted(required):
        if key not in obj:
            raise ConfigError(f"{where}: missing required key {key!r}")
    return obj


def _yaml_float(obj: Any) -> Any:
    """PyYAML reads ``1e-3`` (no dot) as a string; accept such numeric strings."""
    if isinstance(obj, str):
        try:
            return float(obj)
        except ValueError:
            return obj
    return obj


def _real(obj: Any, where: str, positive: bool = False) -> float:
    obj = _yaml_float(obj)
    if isinstance(obj, bool) or not isinstance(obj, int | float) or not np.isfinite(obj):
        raise ConfigError(f"{where}: expected a finite number, got {obj!r}")
    if positive and obj <= 0:
        raise ConfigError(f"{where}: must be positive, got {obj!r}")
    return float(obj)


def _array(obj: Any, where: str, ndim: int) -> np.ndarray:
    bad = ConfigError(f"{where}: expected a {'vector' if ndim == 1 else 'matrix'} of numbers")
    if not isinstance(obj, list):
        raise bad
    try:
        arr = np.array(obj, dtype=float)
    except (TypeError, ValueError):
        raise bad from None
    if arr.ndim != ndim or arr.size == 0 or not np.all(np.isfinite(arr)):
        raise bad
    return arr


def _matrix(obj: Any, where: str, C: int | None) -> np.ndarray:
    if isinstance(obj, dict):
        _mapping(obj, where, _ROT, _ROT)
        theta = _real(obj["rotation_deg"], f"{where}.rotation_deg")
        ev = _array(obj["eigenvalues"], f"{where}.eigenvalues", 1)
        if ev.shape != (2,):
            raise ConfigError(f"{where}.eigenvalues: rotation form needs exactly 2 eigenvalues")
        A = rotated_diag(theta, ev)
    else:
        A = _array(obj, where, 2)
        if A.shape[0] != A.shape[1]:
            raise ConfigError(f"{where}: matrix must be square, got shape {A.shape}")
        if not np.allclose(A, A.T, rtol=1e-10, atol=1e-12):
            raise ConfigError(f"{where}: matrix must be symmetric")
        A = sym(A)
    if C is not None and A.shape != (C, C):
        raise ConfigError(f"{where}: expected a {C}×{C} matrix, got {A.shape[0]}×{A.shape[1]}")
    if min_eig(A) <= 0:
        raise ConfigError(f"{where}: matrix must be positive definite")
    return A


def _clients(obj: Any, C: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(obj, list) or not obj:
        raise ConfigError("clients: expected a non-empty list of clients")
    mus, covs, ws = [], [], []
    for m, c in enumerate(obj):
        where = f"clients[{m}]"
        _mapping(c, where, _CLIENT, {"mean", "cov"})
        mu = _array(c["mean"], f"{where}.mean", 1)
        C = len(mu) if C is None else C
        if mu.shape != (C,):
            raise ConfigError(f"{where}.mean: expected {C} entries, got {len(mu)}")
        covs.append(_matrix(c["cov"], f"{where}.cov", C))
        mus.append(mu)
        ws.append(_real(c.get("weight", 1.0), f"{where}.weight", positive=True))
    w = np.array(ws)
    return np.stack(mus), np.stack(covs), w / w.sum()


def _initial_head(obj: Any, C: int) -> np.ndarray:
    if obj is None:
        return np.eye(C)
    _mapping(obj, "init", _INIT, set())
    if "gram" in obj and "head" in obj:
        raise ConfigError("init: give either 'gram' or 'head', not both")
    if "head" in obj:
        W = _array(obj["head"], "init.head", 2)
        if W.shape[0] != C or W.shape[1] < C or np.linalg.matrix_rank(W) < C:
            raise ConfigError(f"init.head: expected a full-row-rank {C}×P matrix with P >= {C}")
        return W
    if "gram" in obj:
        return sqrtm_psd(_matrix(obj["gram"], "init.gram", C))
    return np.eye(C)


def _settings(obj: Any) -> SimSettings:
    if obj is None:
        return SimSettings()
    names = set(SimSettings.field_names())
    values = dict(_mapping(obj, "simulation", names, set()))
    for key, default in SimSettings.__dataclass_fields__.items():
        if key in values and isinstance(default.default, float):
            values[key] = _yaml_float(values[key])
    return SimSettings(**values)


def parse_ufm_config(raw: Any, source: str = "<config>") -> UFMConfig:
    """Validate a parsed YAML document and build a :class:`UFMConfig`.

    The instance must be fully active: every client covariance has smallest eigenvalue
    above ``lam_H * lam_W`` (checked here, naming the client).
    """
    try:
        top = _mapping(raw, source, _TOP, {"lam_H", "lam_W", "clients"})
        lam_H = _real(top["lam_H"], "lam_H", positive=True)
        lam_W = _real(top["lam_W"], "lam_W", positive=True)
        mus, covs, p = _clients(top["clients"], None)
        inst = UFMInstance(mus=mus, Sigmas=covs, p=p, lam_H=lam_H, lam_W=lam_W)
        client_grams(inst)
        W0 = _initial_head(top.get("init"), inst.C)
        settings = _settings(top.get("simulation"))
    except ConfigError as err:
        text = str(err)  # errors of the top-level mapping already name the source
        raise type(err)(text if text.startswith(f"{source}:") else f"{source}: {text}") from None
    return UFMConfig(instance=inst, W0=W0, settings=settings, source=source)


def load_ufm_config(path: str | Path) -> UFMConfig:
    """Read and validate a UFM config file (strict YAML, :func:`fedsheaf.util.yamlio.load`)."""
    path = Path(path)
    if path.exists() and not (path.is_file() or path.is_dir()):
        raise ConfigError(f"cannot read UFM config {str(path)!r}: not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read UFM config {str(path)!r}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read UFM config {str(path)!r}: not UTF-8 text") from None
    try:
        raw = yamlio.load(text)
    except (yaml.YAMLError, RecursionError, *yamlio.BAD_VALUE) as err:
        raise ConfigError(f"{path}: invalid YAML: {yamlio.problem(err)}") from None
    return parse_ufm_config(raw, source=str(path))


def load_instance(path: str | Path) -> UFMInstance:
    """The :class:`UFMInstance` of a UFM config file."""
    return load_ufm_config(path).instance


def random_orthogonal(rng: np.random.Generator, C: int) -> np.ndarray:
    """Haar-distributed ``C×C`` orthogonal matrix (QR of a Gaussian, signs fixed)."""
    Q, R = np.linalg.qr(rng.standard_normal((C, C)))
    return Q * np.sign(np.diag(R))


def random_instance(
    seed: int,
    C: int,
    M: int,
    lam_H: float = 0.1,
    lam_W: float = 0.1,
    eig_range: tuple[float, float] = (0.05, 3.0),
    mean_scale: float = 1.0,
) -> UFMInstance:
    """A random fully active UFM instance (the App. D recipe, seeded).

    Covariances have Haar eigenbases and eigenvalues uniform in ``eig_range`` (whose lower
    end must exceed ``lam_H * lam_W``); means are ``mean_scale`` times standard normal;
    weights are uniform in ``[0.2, 1]`` and normalised.
    """
    if not eig_range[0] > lam_H * lam_W:
        raise ConfigError(
            f"eig_range lower end {eig_range[0]} must exceed lam_H*lam_W = {lam_H * lam_W}"
        )
    rng = np.random.default_rng(seed)
    Sigmas = []
    for _ in range(M):
        Q = random_orthogonal(rng, C)
        Sigmas.append(sym((Q * rng.uniform(*eig_range, size=C)) @ Q.T))
    mus = mean_scale * rng.standard_normal((M, C))
    w = rng.uniform(0.2, 1.0, size=M)
    return UFMInstance(mus=mus, Sigmas=np.stack(Sigmas), p=w / w.sum(), lam_H=lam_H, lam_W=lam_W)
