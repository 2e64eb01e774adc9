"""Models as plug-ins: the agents' models and the server-based runs' model, by name.

Two registries (:class:`~fedsheaf.util.registry.Registry`), each naming a factory by a
built-in name, an installed plug-in's name (its entry-point group) or
``"package.module:callable"``:

* :data:`AGENT_MODELS` (entry-point group ``fedsheaf.models``; config keys
  ``agents[i].model``, ``agents[i].model_args``): the model of one agent of a
  decentralized or hub run. Built-in: ``cnn``, the Table-2/3 CNN encoder with its
  whitening and the colouring MLP head (:func:`cnn`).
* :data:`SERVER_MODELS` (entry-point group ``fedsheaf.server_models``; config keys
  ``federated.model``, ``federated.model_args``): the common model of a server-based run.
  Built-in: ``fedrep_cnn``, the FedRep authors' CNN (:func:`fedrep_cnn`).

Both kinds of factory are called as ``factory(input_shape, n_classes, **model_args)``:
``input_shape`` is one sample's shape as the data set gives it (``(C, H, W)`` images,
``(F,)`` vectors), ``n_classes`` its number of classes. A factory with a ``seed``
parameter gets the seed fedsheaf derives for the model (from the run seed and, for an
agent, its id); the call is made with torch's CPU generator forked and seeded with it
(:func:`torch.random.fork_rng`), so a factory that initialises its layers the default
way is deterministic too, and the caller's generator state is the same afterwards.

An **agent model** is an ``nn.Module`` with

* ``encode(x) -> (B, d)``: the latents after the encoder (whitened, if the model wants;
  Sheaf-FRL's edge maps act on exactly these, and ``d`` must be the graph file's dim of
  the agent's node);
* ``decode(z) -> (B, n_classes)``: logits from latents (colouring, if any, first).

It trains with ``model.train()`` (BatchNorm on batch statistics; Sheaf-FRL encodes the
private batch and the pilots in training mode too) and is evaluated with ``model.eval()``.
Dropout must be :class:`~fedsheaf.models.seeded.GeneratorDropout` (its masks come from a
generator fedsheaf derives for the agent); ``torch.nn.Dropout`` draws from torch's global
generator, so a model holding one with ``p > 0`` is refused.

A **server model** is an ``nn.Module`` with

* ``representation(x) -> (B, r)``: the body's output;
* a head submodule named by its class attribute ``HEAD`` (a string, dotted for a nested
  module; ``"head"`` when absent) mapping ``(B, r)`` to ``(B, n_classes)`` logits;
* ``forward(x) == head(representation(x))``.

The body is every parameter outside the head (:func:`head_names`, :func:`body_names`):
FedRep and FedPer share the body, LG-FedAvg the head, FedAvg everything.

Every built model is checked once, on a batch of two zero inputs (CPU, eval mode, no
gradients): a missing method or a wrong output shape is one ConfigError line naming the
config key.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from fedsheaf.models.encoders import AgentModel, build_agent_model
from fedsheaf.models.fedrep_cnn import FedRepCNN, build_fedrep_cnn
from fedsheaf.models.seeded import GeneratorDropout
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.registry import Registry

__all__ = [
    "AGENT_MODELS",
    "SERVER_MODELS",
    "body_names",
    "build_agent",
    "build_server_model",
    "check_agent_model",
    "check_server_model",
    "cnn",
    "fedrep_cnn",
    "has_seeded_dropout",
    "head_module",
    "head_name",
    "head_names",
    "uses_global_dropout",
]

#: Agent models by name (``agents[i].model``).
AGENT_MODELS = Registry("agent model", "fedsheaf.models", "agents[i].model", "agents[i].model_args")
#: Server-based runs' models by name (``federated.model``).
SERVER_MODELS = Registry(
    "server model", "fedsheaf.server_models", "federated.model", "federated.model_args"
)
#: Samples of the zero batch a built model is checked on (BatchNorm needs more than one).
CHECK_BATCH = 2


def cnn(
    input_shape: Sequence[int],
    n_classes: int,
    *,
    encoder: Sequence[int],
    head: Sequence[int] = (),
    dropout: float = 0.0,
    whitening: str = "standardize",
    seed: int,
) -> AgentModel:
    """The built-in agent model ``cnn`` (SPEC Tables 2 and 3): CNN blocks of the
    ``encoder`` widths, latent whitening, colouring, an MLP head of the ``head`` widths
    with ``dropout``. fedsheaf gives it ``agents[i].encoder``, ``head``, ``dropout`` and
    ``sheaf.whitening``."""
    if len(input_shape) != 3:
        raise ValueError(
            f"the built-in cnn takes images (C, H, W), but the data set's samples have "
            f"shape {tuple(input_shape)}; name a model for them in agents[i].model"
        )
    return build_agent_model(
        input_shape[0], encoder, head, dropout, n_classes, whitening, seed=seed
    )


def fedrep_cnn(input_shape: Sequence[int], n_classes: int, *, seed: int) -> FedRepCNN:
    """The built-in server model ``fedrep_cnn``: the FedRep authors' CNN (head ``fc3``)."""
    if len(input_shape) != 3:
        raise ValueError(
            f"the FedRep CNN takes images (C, H, W), but the data set's samples have shape "
            f"{tuple(input_shape)}; name a model for them in federated.model"
        )
    c, h, w = input_shape
    return build_fedrep_cnn(c, (h, w), n_classes, seed=seed)


AGENT_MODELS.register("cnn", cnn)
SERVER_MODELS.register("fedrep_cnn", fedrep_cnn)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _shown(kwargs: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in kwargs.items()) + "}"


def _takes_seed(factory: Any) -> bool:
    try:
        param = inspect.signature(factory).parameters.get("seed")
    except (TypeError, ValueError):  # no signature to read
        return False
    return param is not None and param.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


def _build(
    registry: Registry,
    ref: str,
    input_shape: tuple[int, ...],
    n_classes: int,
    model_args: Mapping[str, Any],
    seed: int,
) -> nn.Module:
    """Call the factory ``ref`` names as ``factory(input_shape, n_classes, **model_args)``
    (plus ``seed=seed`` if it takes one) with torch's CPU generator forked and seeded."""
    key, args_key = registry.key, registry.args_key

    def fail(what: str) -> ConfigError:
        return ConfigError(f"config key '{key}': {registry.kind} {ref!r} {what}")

    factory = registry.resolve(ref)
    kwargs = dict(model_args)
    if "seed" in kwargs:
        raise ConfigError(
            f"config key '{args_key}' gives 'seed': fedsheaf gives a model factory its seed "
            "(derived from the run seed); leave it out"
        )
    if _takes_seed(factory):
        kwargs["seed"] = int(seed)
    try:
        inspect.signature(factory).bind(input_shape, n_classes, **kwargs)
    except TypeError as exc:
        raise fail(
            f"cannot be called as {registry.kind.split()[-1]}(input_shape, n_classes, "
            f"**{args_key}) with {args_key} {_shown(model_args)}: {exc}"
        ) from None
    except ValueError:  # no signature to read: the call will tell
        pass
    try:
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(int(seed))
            model = factory(input_shape, n_classes, **kwargs)
    except ConfigError:
        raise
    except Exception as exc:  # the user's code: one line, no traceback
        raise fail(f"raised while building the model: {_one_line(exc)}") from None
    if not isinstance(model, nn.Module):
        raise fail(f"returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def _agent_registry(agent: int) -> Registry:
    """:data:`AGENT_MODELS` with its messages naming agent ``agent``'s keys."""
    view = copy.copy(AGENT_MODELS)  # (shares the built-ins)
    view.key, view.args_key = f"agents[{agent}].model", f"agents[{agent}].model_args"
    return view


def build_agent(
    ref: str,
    agent: int,
    input_shape: Sequence[int],
    n_classes: int,
    model_args: Mapping[str, Any],
    seed: int,
) -> nn.Module:
    """Agent ``agent``'s model as ``agents[agent].model`` names it, unchecked (on the
    default device: the memory estimate builds it on ``meta``); see
    :func:`check_agent_model`."""
    return _build(
        _agent_registry(agent), ref, tuple(int(s) for s in input_shape), n_classes, model_args, seed
    )


def uses_global_dropout(model: nn.Module) -> str | None:
    """The name of a dropout layer of ``model`` that draws from torch's global generator
    (``torch.nn.Dropout`` and its kin with ``p > 0``), else None."""
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            return f"{name or 'the model'} ({type(module).__name__}(p={module.p:g}))"
    return None


class _Modes:
    """Eval mode inside, every module's own training flag restored after."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.flags = [(m, m.training) for m in model.modules()]

    def __enter__(self) -> None:
        self.model.eval()

    def __exit__(self, *exc: object) -> None:
        for m, flag in self.flags:
            m.training = flag


def _shape(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return str(tuple(value.shape))
    return f"a {type(value).__name__}, not a tensor"


def _refuse_global_dropout(model: nn.Module, fail: Any, whose: str) -> None:
    """``fail`` (a ConfigError) if ``model`` has a dropout that draws from torch's global
    generator; ``whose`` says where fedsheaf's :class:`GeneratorDropout` draws from."""
    bad = uses_global_dropout(model)
    if bad is not None:
        raise fail(
            f"has dropout {bad}, which draws from torch's global generator (runs would not "
            f"follow the seed); use fedsheaf.GeneratorDropout, whose masks fedsheaf draws "
            f"from {whose}"
        )


def _probe(fail: Any, call: str, fn: Any, x: torch.Tensor, must: str) -> torch.Tensor:
    """``fn(x)`` on the check batch ``x``, which must give a 2-D tensor of ``CHECK_BATCH``
    rows; anything else is ``fail`` naming ``call`` and what it ``must`` give."""
    try:
        out = fn(x)
    except Exception as exc:
        raise fail(
            f"{call} failed on a batch of shape {tuple(x.shape)}: {_one_line(exc)}"
        ) from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != CHECK_BATCH:
        raise fail(f"{call} gave {_shape(out)} for a batch of shape {tuple(x.shape)}; {must}")
    return out


def check_agent_model(
    model: nn.Module,
    ref: str,
    agent: int,
    input_shape: Sequence[int],
    n_classes: int,
    dim: int | None = None,
    graph: str | None = None,
) -> int:
    """Check agent ``agent``'s built model once and return its latent size ``d``.

    It must have ``encode`` and ``decode``, no global-generator dropout, encode a batch
    of two zero inputs of ``input_shape`` to ``(2, d)`` (``d`` equal to ``dim``, the
    graph file's dim of the node, when given) and decode those latents to
    ``(2, n_classes)``. Runs on the CPU in eval mode without gradients; the model's
    training flags are restored. Raises a ConfigError naming ``agents[agent].model``."""
    key = f"agents[{agent}].model"
    kind = type(model).__name__

    def fail(what: str) -> ConfigError:
        return ConfigError(f"config key '{key}': agent model {ref!r} {what}")

    for method in ("encode", "decode"):
        if not callable(getattr(model, method, None)):
            raise fail(
                f"built a {kind} without {method}(): an agent model needs "
                "encode(x) -> (B, d) latents and decode(z) -> (B, n_classes) logits"
            )
    _refuse_global_dropout(model, fail, "the agent's own generator")
    x = torch.zeros((CHECK_BATCH, *input_shape))
    with _Modes(model), torch.no_grad():
        must = f"it must give (B, d) latents, here ({CHECK_BATCH}, d)"
        z = _probe(fail, "encode(x)", model.encode, x, must)
        d = int(z.shape[1])
        if dim is not None and d != dim:
            where = f"graph {graph}" if graph else "the graph"
            raise fail(f"encodes to d = {d} but {where} gives node {agent} dim {dim}")
        try:
            logits = model.decode(z)  # type: ignore[operator]
        except Exception as exc:
            raise fail(
                f"decode(z) failed on latents of shape {tuple(z.shape)}: {_one_line(exc)}"
            ) from None
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (CHECK_BATCH, n_classes):
            raise fail(
                f"decode(z) gave {_shape(logits)} for latents of shape {tuple(z.shape)}; it "
                f"must give (B, n_classes) logits, here ({CHECK_BATCH}, {n_classes})"
            )
    return d


# ---- server models: head and body ---------------------------------------------------
def head_name(model: nn.Module) -> str:
    """The attribute path of ``model``'s head: its ``HEAD`` (default ``"head"``)."""
    name = getattr(model, "HEAD", "head")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"HEAD must name the head submodule, got {name!r}")
    return name


def head_module(model: nn.Module) -> nn.Module:
    """``model``'s head submodule (:func:`head_name`)."""
    return model.get_submodule(head_name(model))


def head_names(model: nn.Module) -> list[str]:
    """Parameter names of ``model``'s head, in ``named_parameters`` order."""
    head = head_name(model)
    return [n for n, _ in model.named_parameters() if n == head or n.startswith(f"{head}.")]


def body_names(model: nn.Module) -> list[str]:
    """Parameter names of ``model``'s body: every parameter outside the head."""
    head = set(head_names(model))
    return [n for n, _ in model.named_parameters() if n not in head]


def check_server_model(
    model: nn.Module, ref: str, input_shape: Sequence[int], n_classes: int
) -> None:
    """Check a server-based run's built model once: ``representation(x)`` gives
    ``(B, r)``, the ``HEAD`` submodule (with parameters) maps it to ``(B, n_classes)``,
    and ``forward(x)`` is ``head(representation(x))``; no global-generator dropout.
    Runs on the CPU in eval mode without gradients on a batch of two zero inputs.
    Raises a ConfigError naming ``federated.model``."""
    kind = type(model).__name__

    def fail(what: str) -> ConfigError:
        return ConfigError(f"config key 'federated.model': server model {ref!r} {what}")

    if not callable(getattr(model, "representation", None)):
        raise fail(
            f"built a {kind} without representation(): a server model needs "
            "representation(x) -> (B, r) and a head submodule named by its HEAD attribute "
            "(default 'head'), with forward(x) = head(representation(x))"
        )
    try:
        head = head_module(model)
    except (ValueError, AttributeError) as exc:
        raise fail(
            f"built a {kind} whose head cannot be found: {_one_line(exc)}; set the class "
            "attribute HEAD to the name of its head submodule (default 'head')"
        ) from None
    if not head_names(model):
        raise fail(f"built a {kind} whose head {head_name(model)!r} has no parameters")
    _refuse_global_dropout(model, fail, "a generator of (seed, client, round)")
    x = torch.zeros((CHECK_BATCH, *input_shape))
    with _Modes(model), torch.no_grad():
        must = f"it must give (B, r), here ({CHECK_BATCH}, r)"
        r = _probe(fail, "representation(x)", model.representation, x, must)
        try:
            logits = head(r)
        except Exception as exc:
            raise fail(
                f"head {head_name(model)!r} failed on a representation of shape "
                f"{tuple(r.shape)}: {_one_line(exc)}"
            ) from None
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (CHECK_BATCH, n_classes):
            raise fail(
                f"head {head_name(model)!r} gave {_shape(logits)} for a representation of "
                f"shape {tuple(r.shape)}; it must give (B, n_classes), here "
                f"({CHECK_BATCH}, {n_classes})"
            )
        try:
            out = model(x)
        except Exception as exc:
            raise fail(
                f"forward(x) failed on a batch of shape {tuple(x.shape)}: {_one_line(exc)}"
            ) from None
        if (
            not isinstance(out, torch.Tensor)
            or out.shape != logits.shape
            or not torch.allclose(out, logits, rtol=1e-4, atol=1e-5)
        ):
            raise fail(
                "forward(x) is not head(representation(x)): FedRep's head-only phases train "
                "the head on the representation, so the two must agree"
            )


def build_server_model(
    ref: str,
    input_shape: Sequence[int],
    n_classes: int,
    model_args: Mapping[str, Any],
    seed: int,
) -> nn.Module:
    """The server-based run's common initial model (on CPU) as ``federated.model`` names
    it, checked (:func:`check_server_model`)."""
    shape = tuple(int(s) for s in input_shape)
    model = _build(SERVER_MODELS, ref, shape, n_classes, model_args, seed)
    check_server_model(model, ref, shape, n_classes)
    return model


def has_seeded_dropout(model: nn.Module) -> bool:
    """Whether ``model`` holds a :class:`GeneratorDropout` that can drop (``p > 0``)."""
    return any(isinstance(m, GeneratorDropout) and m.p > 0 for m in model.modules())
