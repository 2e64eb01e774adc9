"""A user's data-set module, as a researcher would write one outside fedsheaf: the tests
write it into a temporary directory and name its loaders as ``userdata:<name>`` with that
directory on PYTHONPATH (nothing installed). Every loader is called as
``load(root, split, download, **data.dataset_args)``."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

MODULE = "userdata"

SOURCE = textwrap.dedent(
    '''
    from pathlib import Path

    import numpy as np
    import torch


    def _blobs(n, features, classes, seed):
        """Gaussian blobs: one centre per class, every class present."""
        rng = np.random.default_rng(seed)
        y = np.arange(n) % classes
        rng.shuffle(y)
        centres = np.random.default_rng(99).normal(0.0, 3.0, (classes, features))
        return centres[y] + rng.normal(0.0, 1.0, (n, features)), y


    def _seed(split):
        return 0 if split == "train" else 1


    def vectors(root, split, download, n=120, features=6, classes=3):
        """Plain vectors (N, F): float32 tensors, int64 labels."""
        x, y = _blobs(n, features, classes, _seed(split))
        return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


    def images(root, split, download, n=240, classes=4, side=8):
        """numpy float64 images (N, 1, side, side), int32 labels and the class count."""
        x, y = _blobs(n, side * side, classes, _seed(split))
        return x.reshape(n, 1, side, side), y.astype(np.int32), classes


    def uint8_images(root, split, download, n=30):
        """uint8 images (N, 3, 4, 4), labels as a list."""
        rng = np.random.default_rng(_seed(split))
        return rng.integers(0, 256, (n, 3, 4, 4), dtype=np.uint8), [i % 5 for i in range(n)]


    class Pairs(torch.utils.data.Dataset):
        """A map-style torch Dataset of (x, y) items."""

        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            return torch.from_numpy(self.x[i]), int(self.y[i])


    def torch_dataset(root, split, download, n=50):
        x, y = _blobs(n, 4, 2, _seed(split))
        return Pairs(x.astype(np.float32), y)


    def from_root(root, split, download):
        """Reads <root>/<split>.npz (x, y): what the data root holds is the data."""
        with np.load(Path(root) / f"{split}.npz") as f:
            return f["x"], f["y"]


    def counted(root, split, download):
        """vectors(), counting its calls in <root>/calls.txt."""
        calls = Path(root) / "calls.txt"
        calls.write_text(str(int(calls.read_text()) + 1 if calls.exists() else 1))
        return vectors(root, split, download)


    def train_only(root, split, download, **kwargs):
        """A data set with a single split, as many are."""
        if split != "train":
            raise FileNotFoundError(f"no {split} split: this data set has a training split only")
        return images(root, split, download, **kwargs)


    def wrong_signature(root):
        return images(root, "train", False)


    def raises(root, split, download):
        raise RuntimeError("the disk is on fire")


    def wrong_return(root, split, download):
        x, y, _ = images(root, split, download)
        return {"x": x, "y": y}


    def out_of_range(root, split, download):
        x, y, _ = images(root, split, download)
        y[5] = 7
        return x, y, 4


    def mismatch(root, split, download):
        return np.zeros((10, 3), np.float32), np.zeros(9, np.int64)


    def float_labels(root, split, download):
        x, y, _ = images(root, split, download)
        return x, y.astype(np.float64)


    def flat_samples(root, split, download):
        return np.zeros(10, np.float32), np.zeros(10, np.int64)


    def not_finite(root, split, download):
        x, y, _ = images(root, split, download)
        x[3, 0, 0, 0] = np.nan
        return x, y
    '''
)

#: A module that fails while being imported (a dependency it needs is not installed).
BROKEN = "import a_package_that_is_not_installed_anywhere\n"


def write_user_datasets(directory: Path) -> Path:
    """Write :data:`SOURCE` as ``directory/userdata.py`` (and a module that does not
    import, ``userdata_broken.py``); returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{MODULE}.py").write_text(SOURCE)
    (directory / f"{MODULE}_broken.py").write_text(BROKEN)
    return directory


def pythonpath(directory: Path) -> str:
    """PYTHONPATH with ``directory`` first."""
    path = os.environ.get("PYTHONPATH")
    return f"{directory}{os.pathsep}{path}" if path else str(directory)
