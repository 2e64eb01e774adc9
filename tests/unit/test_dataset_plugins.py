"""Data sets as plug-ins (``data.dataset``, ``data.dataset_args``): a user's loader written
to a temporary directory and named ``userdata:<loader>`` with that directory on the path,
its returns (tensors, numpy, a torch Dataset, vectors), every fault as one line naming
data.dataset, the fingerprint of its data; and the built-ins reading only the split asked
for (a data root holding only MNIST's test files)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsheaf.algorithms.federated.setup import check_setup, data_splits, load_clients
from fedsheaf.config.sections import load_config
from fedsheaf.data.datasets_registry import (
    DATASETS,
    clear_cache,
    dataset_ref,
    dataset_shape,
    dataset_spec,
    load_dataset,
    splits_read,
)
from fedsheaf.data.sources import black_level, data_digest, expected_files, require_files
from fedsheaf.runtime import experiment
from fedsheaf.util.errors import DataError, FedsheafError
from tests.conftest import REPO
from tests.user_datasets import write_user_datasets

QUICK = REPO / "configs" / "quickstart.yaml"


@pytest.fixture
def userdata(tmp_path, monkeypatch):
    """The user's module on the import path (as PYTHONPATH puts it there), fresh caches."""
    directory = write_user_datasets(tmp_path / "pkgs")
    monkeypatch.syspath_prepend(str(directory))
    for name in ("userdata", "userdata_broken"):
        sys.modules.pop(name, None)
    clear_cache()
    yield directory
    clear_cache()


def _write_idx(raw: Path, prefix: str, images: np.ndarray, labels: np.ndarray) -> None:
    """The real IDX format (big-endian header, uint8 payload)."""
    raw.mkdir(parents=True, exist_ok=True)
    n, h, w = images.shape
    (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
        struct.pack(">IIII", 2051, n, h, w) + images.astype(np.uint8).tobytes()
    )
    (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(
        struct.pack(">II", 2049, n) + labels.astype(np.uint8).tobytes()
    )


def mnist_test_files_only(root: Path, n: int = 300) -> Path:
    """A data root holding MNIST's t10k files alone (random images, every class)."""
    rng = np.random.default_rng(3)
    labels = np.arange(n) % 10
    rng.shuffle(labels)
    _write_idx(root / "MNIST" / "raw", "t10k", rng.integers(0, 256, (n, 28, 28)), labels)
    return root


# ---------------------------------------------------------------- built-ins: one split's files


def test_mnist_test_split_reads_the_test_files_alone(tmp_path):
    root = mnist_test_files_only(tmp_path / "data")
    raw = root / "MNIST" / "raw"
    assert expected_files("mnist", root, "test") == [
        raw / "t10k-images-idx3-ubyte",
        raw / "t10k-labels-idx1-ubyte",
    ]
    require_files("mnist", root, "test")  # nothing missing for the split read
    with pytest.raises(DataError, match="train-images-idx3-ubyte"):
        require_files("mnist", root, "train")
    ds = load_dataset("mnist", root, "test")
    # byte for byte what torchvision's own readers give
    from torchvision.datasets.mnist import read_image_file, read_label_file

    assert ds.pixels.dtype == torch.uint8 and ds.shape == (300, 1, 28, 28)
    assert torch.equal(ds.pixels[:, 0], read_image_file(str(raw / "t10k-images-idx3-ubyte")))
    assert torch.equal(ds.y, read_label_file(str(raw / "t10k-labels-idx1-ubyte")))
    # a graph run on data.split=test partitions it; the training files are never wanted
    cfg = load_config(
        QUICK, ["data.dataset=MNIST", f"data.root={root}", "data.split=test", "data.limit=300"]
    )
    got, part = experiment.load_and_partition(cfg)
    assert got.name == "mnist" and len(part.agents) == 4 and part.pilots.size > 0


# ---------------------------------------------------------------- a plug-in's returns


def test_a_plugin_returning_tensors_vectors(userdata, tmp_path):
    ds = load_dataset("userdata:vectors", tmp_path, "train", args={"n": 90, "features": 5})
    assert ds.name == "userdata:vectors" and ds.shape == (90, 5) and ds.n_classes == 3
    assert ds.pixels.dtype == torch.float32 and ds.y.dtype == torch.int64
    x, y = sys.modules["userdata"].vectors(str(tmp_path), "train", False, n=90, features=5)
    assert torch.equal(ds.x, x) and torch.equal(ds.take([4, 1]), x[[4, 1]])  # as given
    assert torch.equal(ds.y, y)
    assert dataset_shape("userdata:vectors", tmp_path, args={"n": 90, "features": 5}) == (5, 3)
    assert black_level("userdata:vectors") == (0.0,)


def test_a_plugin_returning_numpy_with_its_class_count(userdata, tmp_path):
    ds = load_dataset("userdata:images", tmp_path, "test", limit=50)
    assert ds.shape == (50, 1, 8, 8) and ds.n_classes == 4 and ds.x.dtype == torch.float32
    x, y, _ = sys.modules["userdata"].images(str(tmp_path), "test", False)
    assert torch.equal(ds.x, torch.tensor(x[:50], dtype=torch.float32))
    assert torch.equal(ds.y, torch.tensor(y[:50], dtype=torch.int64))
    u8 = load_dataset("userdata:uint8_images", tmp_path)  # uint8 kept, labels from a list
    assert u8.pixels.dtype == torch.uint8 and u8.n_classes == 5
    assert torch.equal(u8.take([0]), u8.pixels[:1].float())  # taken as given, no scaling


def test_a_plugin_returning_a_torch_dataset(userdata, tmp_path):
    ds = load_dataset("userdata:torch_dataset", tmp_path, "train", args={"n": 20})
    items = sys.modules["userdata"].torch_dataset(str(tmp_path), "train", False, n=20)
    assert ds.shape == (20, 4) and ds.n_classes == 2
    assert torch.equal(ds.x, torch.stack([items[i][0] for i in range(20)]))
    assert ds.y.tolist() == [items[i][1] for i in range(20)]


def test_partitions_and_pilots_work_on_plugin_vectors(userdata, tmp_path):
    cfg = load_config(
        QUICK,
        [
            "data.dataset=userdata:vectors",
            "data.dataset_args={n: 400, features: 7, classes: 10}",
            f"data.root={tmp_path}",
        ],
    )
    ds, part = experiment.load_and_partition(cfg)
    data = experiment.agent_data(ds, part, 1, torch.device("cpu"))
    assert data.x_train.shape[1:] == (7,) and data.x_pilot.shape[1:] == (7,)
    own = np.isin(data.y_train.numpy(), [3, 4, 5, 6, 7]).mean()  # Eq. 23's label shift
    assert own > 0.5 and data.n_classes == 10
    assert dataset_spec(cfg.data) == ((7,), 10)


def test_a_plugin_is_loaded_once_per_process(userdata, tmp_path):
    cfg = load_config(QUICK, ["data.dataset=userdata:counted", f"data.root={tmp_path}"])
    assert dataset_spec(cfg.data) == ((6,), 3)
    load_dataset(cfg.data.dataset, tmp_path, "train", limit=10)
    clear_cache()  # (what a server-based rank does once its clients' data are cut)
    assert dataset_spec(cfg.data) == ((6,), 3)  # its shape is remembered
    assert (tmp_path / "calls.txt").read_text() == "1"


def test_builtin_names_keep_their_spelling_and_need_no_files():
    assert dataset_ref(" Fashion-MNIST ") == "fashionmnist" and dataset_ref("CIFAR_10") == "cifar10"
    assert dataset_ref("pkg.mod:load") == "pkg.mod:load"
    assert DATASETS.builtin == ["digits", "mnist", "fashionmnist", "cifar10"]
    assert dataset_shape("CIFAR10", "/nonexistent") == (3, 32, 32, 10)


def test_the_splits_a_run_reads(tmp_path):
    cfg = load_config(QUICK, ["data.split=test"])
    assert splits_read(cfg) == ("test",)
    server = load_config(QUICK, ["algorithm=fedavg", "data.dataset=mnist"])
    assert splits_read(server) == ("train", "test")


# ---------------------------------------------------------------- faults: one line naming the key


@pytest.mark.parametrize(
    "ref,args,said",
    [
        ("no_such_package_anywhere:load", {}, "does not import: no module named"),
        ("userdata_broken:load", {}, "does not import: ModuleNotFoundError"),
        ("userdata:nope", {}, "does not exist: userdata has no 'nope'"),
        ("mydata", {}, "is unknown"),
        ("userdata:wrong_signature", {}, "cannot be called as load(root, split, download"),
        ("userdata:vectors", {"colour": "red"}, "with data.dataset_args {colour: 'red'}"),
        ("mnist", {"n": 3}, "cannot be called as load(root, split, download"),
        ("userdata:raises", {}, "its loader raised RuntimeError: the disk is on fire"),
        ("userdata:wrong_return", {}, "returned dict; a loader returns (x, y)"),
        ("userdata:out_of_range", {}, "has label 7, outside its 4 classes 0..3"),
        ("userdata:mismatch", {}, "returned 10 samples but 9 labels"),
        ("userdata:float_labels", {}, "returned labels y of dtype float64"),
        ("userdata:flat_samples", {}, "returned samples x of shape (10,)"),
        ("userdata:not_finite", {}, "NaN or infinite values"),
        ("userdata:train_only", {}, "(test split) could not be loaded: its loader raised "),
    ],
)
def test_a_bad_plugin_is_one_line_naming_data_dataset(userdata, tmp_path, ref, args, said):
    with pytest.raises(FedsheafError) as err:
        load_dataset(ref, tmp_path, "test", args=args)
    msg = str(err.value)
    assert msg.startswith("config key 'data.dataset': dataset "), msg
    assert said in msg and "\n" not in msg, msg


def test_a_single_split_plugin_serves_graph_runs_not_server_runs(userdata, tmp_path):
    graph = load_config(
        QUICK,
        [
            "data.dataset=userdata:train_only",
            "data.dataset_args={n: 600, classes: 10}",
            f"data.root={tmp_path}",
        ],
    )
    experiment.load_and_partition(graph)  # data.split=train: all it reads
    server = load_config(
        QUICK,
        [
            "algorithm=fedavg",
            "data.dataset=userdata:train_only",
            "data.dataset_args={side: 16, classes: 10}",
            f"data.root={tmp_path}",
        ],
    )
    with pytest.raises(DataError, match=r"^config key 'data.dataset': .* \(test split\) could"):
        data_splits(server)


def test_a_server_run_cuts_plugin_splits_into_clients(userdata, tmp_path):
    cfg = load_config(
        QUICK,
        [
            "algorithm=fedavg",
            "data.dataset=userdata:images",
            "data.dataset_args={n: 400, classes: 10, side: 16}",
            f"data.root={tmp_path}",
            "federated.clients=4",
            "federated.classes_per_client=5",
            "federated.train_per_client=20",
            "federated.test_per_client=10",
        ],
    )
    check_setup(cfg, 3)
    clients = load_clients(cfg, [0, 3], torch.device("cpu"))
    assert clients[3].x_train.shape == (20, 1, 16, 16) and clients[0].x_test.shape[0] == 10
    assert set(clients[0].y_train.tolist()) == set(clients[0].classes)


def test_class_ids_are_checked_against_the_data_set_when_it_is_loaded(userdata, tmp_path):
    overrides = ["agents[0].classes=[3, 12]"]
    cfg = load_config(QUICK, overrides)  # the config alone does not know the classes
    with pytest.raises(FedsheafError) as err:
        experiment.load_and_partition(cfg)
    assert str(err.value) == "config key 'agents[0].classes' has class ids [12] outside 0..9"
    many = load_config(
        QUICK,
        [
            *overrides,
            "data.dataset=userdata:vectors",
            "data.dataset_args={n: 600, classes: 13}",
            f"data.root={tmp_path}",
        ],
    )
    ds, _ = experiment.load_and_partition(many)
    assert ds.n_classes == 13


def test_the_fingerprint_covers_a_plugins_data(userdata, tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 3)).astype(np.float32), np.arange(60) % 3
    np.savez(tmp_path / "train.npz", x=x, y=y)
    first = data_digest(load_dataset("userdata:from_root", tmp_path))
    clear_cache()
    assert data_digest(load_dataset("userdata:from_root", tmp_path)) == first  # deterministic
    x[7, 1] += 0.25  # one value of one sample
    np.savez(tmp_path / "train.npz", x=x, y=y)
    clear_cache()
    assert data_digest(load_dataset("userdata:from_root", tmp_path)) != first
    x[7, 1] -= 0.25
    y[0] = 1  # one label
    np.savez(tmp_path / "train.npz", x=x, y=y)
    clear_cache()
    assert data_digest(load_dataset("userdata:from_root", tmp_path)) != first
