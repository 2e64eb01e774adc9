"""Errors raised by the theory toolkit (all user-facing, see :mod:`fedsheaf.util.errors`)."""

from fedsheaf.util.errors import ConfigError, FedsheafError


class NotFullyActiveError(ConfigError):
    """A covariance is outside the fully active regime ``λ_min(T) > λ_H λ_W``."""


class ConvergenceError(FedsheafError):
    """An iterative solver did not reach its tolerance within its iteration cap."""
