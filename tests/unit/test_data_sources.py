"""Loading real data from disk: sklearn digits, IDX files written here, shared FashionMNIST."""

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsheaf.data import sources
from fedsheaf.data.datasets_registry import clear_cache, dataset_shape, load_dataset
from fedsheaf.data.sources import DataError
from fedsheaf.util.errors import ConfigError
from tests.conftest import shared_data_root

SHARED = shared_data_root() or Path("../shared/data")


def _write_idx(raw: Path, prefix: str, images: np.ndarray, labels: np.ndarray) -> None:
    """Write the real IDX binary format (big-endian header, uint8 payload)."""
    raw.mkdir(parents=True, exist_ok=True)
    n, h, w = images.shape
    (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
        struct.pack(">IIII", 2051, n, h, w) + images.astype(np.uint8).tobytes()
    )
    (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(
        struct.pack(">II", 2049, n) + labels.astype(np.uint8).tobytes()
    )


def test_digits_is_real_and_normalised():
    ds = load_dataset("Digits", root="/nonexistent")
    assert ds.name == "digits" and ds.n_classes == 10
    assert ds.x.shape == (1797, 1, 8, 8) and ds.x.dtype == torch.float32
    assert ds.y.dtype == torch.int64
    assert np.array_equal(
        np.bincount(ds.y.numpy()), [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    )
    assert abs(ds.x.mean().item()) < 1e-2 and abs(ds.x.std().item() - 1) < 1e-2
    # the normalisation is affine in the raw 0..16 values
    from sklearn.datasets import load_digits

    raw = torch.from_numpy(load_digits().images).float()
    assert torch.allclose(ds.x[:, 0] * 0.3760 + 0.3053, raw / 16.0, atol=1e-5)
    assert load_dataset("digits", "/elsewhere") is ds  # cached, root ignored
    held = ds.pixels.clone()  # float pixels on their 0..16 scale: taking rows must copy them
    assert torch.equal(ds.take(slice(0, 100)), ds.x[:100]) and torch.equal(ds.pixels, held)
    with pytest.raises(DataError, match="single split"):
        load_dataset("digits", ".", split="test")


def test_digits_are_scikit_learns_read_without_importing_it():
    """The file scikit-learn ships, read as its load_digits reads it (same values, same
    order), in a process that never imports scikit-learn (about 1 s of a small run's start)."""
    from sklearn.datasets import load_digits

    images, labels = sources._digits_arrays()
    want = load_digits()
    assert images.dtype == want.images.dtype and np.array_equal(images, want.images)
    assert labels.dtype == np.int64 and np.array_equal(labels, want.target)
    probe = (
        "import sys\n"
        "from fedsheaf.data.datasets_registry import load_dataset\n"
        "assert load_dataset('digits', '.').x.shape == (1797, 1, 8, 8)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_mnist_from_written_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, size=(37, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=37, dtype=np.uint8)
    raw = tmp_path / "MNIST" / "raw"
    _write_idx(raw, "train", imgs, labels)
    # only the split asked for is read: the test split's error names its own files only
    with pytest.raises(DataError) as err:
        load_dataset("mnist", tmp_path, split="test")
    msg = str(err.value)
    assert str(raw / "t10k-images-idx3-ubyte") in msg
    assert str(raw / "t10k-labels-idx1-ubyte") in msg
    assert str(raw / "train-images-idx3-ubyte") not in msg

    ds = load_dataset("MNIST", tmp_path)  # the training files alone are enough
    _write_idx(raw, "t10k", imgs[:5, ::-1], labels[:5])
    assert ds.x.shape == (37, 1, 28, 28) and ds.x.dtype == torch.float32
    assert torch.equal(ds.y, torch.from_numpy(labels.astype(np.int64)))
    back = ds.x[:, 0] * 0.3081 + 0.1307
    assert torch.allclose(back * 255.0, torch.from_numpy(imgs).float(), atol=1e-3)
    te = load_dataset("mnist", tmp_path, split="test")
    assert te.x.shape == (5, 1, 28, 28)
    assert torch.allclose(
        (te.x[:, 0] * 0.3081 + 0.1307) * 255.0, back[:5].flip(1) * 255.0, atol=1e-3
    )
    assert not (tmp_path / "MNIST" / "processed").exists()  # raw files read directly
    # held as the file's bytes; rows are normalised as they are taken, and taking them
    # changes nothing held (nor does the whole split's x)
    assert ds.pixels.dtype == torch.uint8 and torch.equal(ds.pixels[:, 0], torch.from_numpy(imgs))
    rows = torch.tensor([3, 0, 36])
    assert torch.equal(ds.take(rows), ds.x[rows]) and torch.equal(ds.take(slice(2, 5)), ds.x[2:5])
    assert ds.take(rows).is_contiguous() and torch.equal(ds.pixels[:, 0], torch.from_numpy(imgs))
    assert ds.shape == (37, 1, 28, 28)
    first = load_dataset("mnist", tmp_path, limit=10)  # data.limit: the first samples
    assert first.shape == (10, 1, 28, 28) and torch.equal(first.x, ds.x[:10])


def test_corrupt_idx_file_is_a_data_error(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    for prefix in ("train", "t10k"):
        _write_idx(raw, prefix, np.zeros((4, 28, 28), np.uint8), np.zeros(4, np.uint8))
    path = raw / "train-images-idx3-ubyte"
    whole = path.read_bytes()
    path.write_bytes(whole[:100])  # truncated payload
    with pytest.raises(DataError) as err:
        load_dataset("fashionmnist", tmp_path)
    assert str(err.value).startswith(
        f"cannot load dataset 'fashionmnist' (train split) from data root {tmp_path}: "
        f"{path} is damaged or truncated (100 bytes, its header says {len(whole)})."
    )
    for junk in (b"", b"random bytes, not an IDX header"):  # the file that is wrong is named
        labels = raw / "t10k-labels-idx1-ubyte"
        path.write_bytes(whole)
        labels.write_bytes(junk)
        with pytest.raises(DataError, match=f"{labels} is not an IDX file"):
            load_dataset("fashionmnist", tmp_path, split="test")


def test_labels_outside_the_classes_are_a_data_error_naming_the_files(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    labels = np.array([3, 255, 1, 0], np.uint8)  # a valid IDX file with a byte gone wrong
    for prefix in ("train", "t10k"):
        _write_idx(raw, prefix, np.zeros((4, 28, 28), np.uint8), labels)
    with pytest.raises(DataError) as err:
        load_dataset("fashionmnist", tmp_path)
    assert str(err.value).startswith(
        f"dataset 'fashionmnist' under {tmp_path} (train split) has label 255, outside its "
        "10 classes 0..9: a damaged labels file"
    )
    assert str(raw / "train-labels-idx1-ubyte") in str(err.value)


def test_a_damaged_cifar_batch_is_named(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in sources._CIFAR_FILES:
        (folder / name).write_bytes(b"not the real batch")
    assert sources.damaged_file("cifar10", tmp_path) == (
        f"{folder / 'data_batch_1'} is damaged or truncated (its checksum differs)"
    )


def test_missing_files_message_names_paths(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("FashionMNIST", tmp_path)
    msg = str(err.value)
    assert str(tmp_path) in msg and "fashionmnist" in msg
    assert str(tmp_path / "FashionMNIST" / "raw" / "train-images-idx3-ubyte") in msg
    assert str(tmp_path / "FashionMNIST" / "raw" / "train-labels-idx1-ubyte") in msg
    assert "data.download=true" in msg
    with pytest.raises(DataError) as err:
        load_dataset("cifar10", tmp_path, split="test")
    msg = str(err.value)
    assert str(tmp_path / "cifar-10-batches-py" / "test_batch") in msg
    assert "data_batch_1" not in msg and "batches.meta" not in msg  # the test split's only


def test_unknown_name_and_split():
    with pytest.raises(ConfigError, match="built-in: digits, mnist, fashionmnist, cifar10"):
        load_dataset("svhn", ".")
    with pytest.raises(DataError, match="unknown split"):
        load_dataset("mnist", ".", split="val")
    with pytest.raises(ConfigError, match="config key 'data.dataset': dataset 'imagenet' is"):
        dataset_shape("imagenet")


def test_dataset_shape_without_loading_the_data():
    """The shapes models are built from before any file is read (digits, bundled, is
    checked against its loaded arrays; the IDX tests load the others)."""
    assert dataset_shape("CIFAR10") == (3, 32, 32, 10)
    assert dataset_shape("fashionmnist") == (1, 28, 28, 10)
    assert dataset_shape("mnist") == (1, 28, 28, 10)
    ds = load_dataset("digits", ".")
    assert dataset_shape("digits") == (*ds.x.shape[1:], ds.n_classes)


@pytest.mark.skipif(
    not (SHARED / "FashionMNIST" / "raw").is_dir(),
    reason="offline FashionMNIST copy ../shared/data/FashionMNIST is absent",
)
def test_shared_fashionmnist():
    ds = load_dataset("fashionmnist", SHARED, split="test")
    assert ds.x.shape == (10000, 1, 28, 28)
    assert np.array_equal(np.bincount(ds.y.numpy()), [1000] * 10)
    # training-split constants: test-split statistics should be close to (0, 1)
    assert abs(ds.x.mean().item()) < 0.05 and abs(ds.x.std().item() - 1) < 0.05
    tr = load_dataset("fashionmnist", SHARED, split="train")
    assert tr.x.shape == (60000, 1, 28, 28) and tr.n_classes == 10
    assert abs(tr.x.mean().item()) < 1e-3 and abs(tr.x.std().item() - 1) < 1e-3
    clear_cache()  # free ~190 MB for the rest of the session
