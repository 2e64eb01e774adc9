"""The devices of a rank's agents (train.agent_gpus): what a CPU rank gives, and how
the log names them; the GPU side (spread over the GPUs a rank owns) is in
tests/unit/test_hostinfo.py (which GPUs) and tests/gpu/test_cuda.py (same numbers)."""

from __future__ import annotations

import pytest
import torch

from fedsheaf.config.sections import load_config
from fedsheaf.launch.decentralized import agent_devices, describe_devices
from fedsheaf.runtime.world import World
from fedsheaf.util.errors import ConfigError


def _world(device: str = "cpu") -> World:
    return World(comm=None, rank=1, size=2, local_rank=1, local_size=2, device=torch.device(device))


@pytest.mark.parametrize("agent_gpus", ["spread", "share"])
def test_a_cpu_rank_gives_every_agent_its_device(agent_gpus):
    devices = agent_devices(_world(), [3, 4, 5], agent_gpus)
    assert devices == {i: torch.device("cpu") for i in (3, 4, 5)}
    assert describe_devices(devices.values()) == "device cpu"


def test_the_log_names_each_distinct_device_once():
    cuda = [torch.device("cuda", i) for i in (0, 2, 0, 2)]
    assert describe_devices(cuda) == "devices cuda:0, cuda:2"


def test_agent_gpus_takes_spread_or_share():
    assert load_config("configs/quickstart.yaml", []).train.agent_gpus == "spread"
    with pytest.raises(ConfigError, match="train.agent_gpus"):
        load_config("configs/quickstart.yaml", ["train.agent_gpus=all"])
