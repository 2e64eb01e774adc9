"""What the neighbourhood exchange copies into its send buffers (``runtime.topology``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("mpi4py")

from fedsheaf.runtime.topology import _as_buffer


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_send_buffer_is_a_float32_copy(dtype):
    mat = torch.arange(6, dtype=dtype).reshape(2, 3).T  # not C-contiguous
    buf = _as_buffer(mat)
    assert buf.dtype == np.float32 and buf.flags.c_contiguous
    np.testing.assert_array_equal(buf, mat.numpy())
    mat.add_(1.0)  # the caller may change its matrix while the send is in flight
    np.testing.assert_array_equal(buf, mat.numpy() - 1.0)


@pytest.mark.parametrize(
    "mat", [torch.zeros(4), torch.zeros(4, dtype=torch.float64), np.zeros((2, 2, 2))]
)
def test_only_matrices_are_sent(mat):
    with pytest.raises(ValueError, match="sends 2-D matrices"):
        _as_buffer(mat)
