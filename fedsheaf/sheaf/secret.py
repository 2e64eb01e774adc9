"""Per-agent secrets of the strict-privacy variant (docs/privacy.md).

Each agent of a ``sheaf.variant=strict`` run holds a secret that no other agent can
derive: 32 bytes from the operating system's randomness (``sheaf.mask_secret: os``,
drawn once per run and kept only in that agent's own checkpoint), or the contents of its
own key file ``<sheaf.mask_secret_dir>/agent-<i>.key`` (``sheaf.mask_secret: file``, the
reproducible mode; the shared config names the directory, never the keys). Everything
the variant must hide from a neighbour is drawn from it: the agent's first masks and its
encoder's initial weights (a neighbour that knows the config could rebuild weights drawn
from the run seed, compute the first pilot matrix itself and read the mask off the first
message by Procrustes).

Seeds come from keyed BLAKE2b (the secret is the key), one per purpose, so that no
global RNG is touched and one purpose's seed says nothing about another's.
"""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

import torch

from fedsheaf.util.errors import ConfigError

__all__ = [
    "MIN_KEY_BYTES",
    "SECRET_BYTES",
    "agent_secret",
    "key_path",
    "read_secret",
    "secret_generator",
    "secret_seed",
]

#: Length of a secret (and of what ``mask_secret: os`` draws).
SECRET_BYTES = 32
#: The shortest key file accepted (128 bits).
MIN_KEY_BYTES = 16


def key_path(directory: str | Path, agent: int) -> Path:
    """Agent ``agent``'s key file in ``directory``: ``agent-<i>.key``."""
    return Path(directory) / f"agent-{int(agent)}.key"


def read_secret(directory: str | Path, agent: int) -> bytes:
    """The secret in agent ``agent``'s key file (any bytes, at least :data:`MIN_KEY_BYTES`,
    hashed to :data:`SECRET_BYTES`)."""
    path = key_path(directory, agent)
    make = f"create it with: head -c {SECRET_BYTES} /dev/urandom > {path}"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"sheaf.mask_secret=file: agent {agent}'s key {path} does not exist ({make})"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"sheaf.mask_secret=file: cannot read agent {agent}'s key {path}: {exc.strerror or exc}"
        ) from None
    if len(raw) < MIN_KEY_BYTES:
        raise ConfigError(
            f"sheaf.mask_secret=file: agent {agent}'s key {path} holds {len(raw)} bytes; it "
            f"needs at least {MIN_KEY_BYTES} random bytes ({make})"
        )
    return hashlib.blake2b(raw, digest_size=SECRET_BYTES, person=b"fedsheaf-key").digest()


def agent_secret(mode: str, directory: str | Path | None, agent: int) -> bytes:
    """Agent ``agent``'s secret: fresh OS randomness (``mode="os"``) or its key file
    (``mode="file"``, in ``directory``)."""
    if mode == "os":
        return secrets.token_bytes(SECRET_BYTES)
    if mode == "file":
        if directory is None:
            raise ConfigError("sheaf.mask_secret=file needs sheaf.mask_secret_dir")
        return read_secret(directory, agent)
    raise ConfigError(f"sheaf.mask_secret must be os or file, got {mode!r}")


def secret_seed(secret: bytes, *keys: int | str) -> int:
    """A 63-bit seed that depends on ``secret`` and the ``keys`` (purpose, neighbour id);
    without the secret it cannot be told from random."""
    if len(secret) < MIN_KEY_BYTES:
        raise ValueError(f"a secret has at least {MIN_KEY_BYTES} bytes, got {len(secret)}")
    message = "\x1f".join(str(k) for k in keys).encode()
    digest = hashlib.blake2b(message, key=secret[:64], digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def secret_generator(secret: bytes, *keys: int | str) -> torch.Generator:
    """A CPU torch generator seeded by :func:`secret_seed`."""
    return torch.Generator().manual_seed(secret_seed(secret, *keys))
