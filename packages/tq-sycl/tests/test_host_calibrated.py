"""tq's calibrated formats (tq_k4v3, tq_k4v4, tq_k6v5) on the host core against tq_core.attention:
the key gain and position 0's score offset in the query, Lloyd-Max values read in the
rotated domain, and each row's output rotated back, divided by the value gain and offset."""

from __future__ import annotations

import pytest
import torch
from cases import make_case, prepared, randint

import tq_core
import tq_sycl
from tq_core.contract import gather_kv
from tq_core.errors import CalibrationError, PresetError
from tq_core.testing import assert_attention_close, ragged_lengths
from tq_sycl.extensions import host_module

NAMES = sorted(tq_core.CALIBRATED_PRESETS)
TOL = 2e-5  # float32 throughout, as for vLLM's presets (test_host_attention.py)


def host(case, num_splits=None):
    return tq_sycl.attention(*case.args(), kernel="host", num_splits=num_splits, **case.extra())


@pytest.mark.parametrize("preset", NAMES)
@pytest.mark.parametrize("group", [1, 4])
def test_ragged_decode_and_verify(gen, preset, group):
    seq_lens, q_lens = ragged_lengths(gen, num_reqs=5, max_q=8, max_seq=90)
    case = make_case(gen, preset, group=group, num_kv_heads=2, seq_lens=seq_lens, q_lens=q_lens)
    splits = randint(gen, 1, 5)
    assert_attention_close(host(case, splits), case.reference(), tol=TOL, what=f"num_splits={splits}")


@pytest.mark.parametrize("head_dim", [64, 256, 512])
def test_head_dims_and_whole_prompts(gen, head_dim):
    """q_len == seq_len (position 0 among the query's own keys) and one-token requests."""
    case = make_case(gen, "tq_k6v5", head_dim=head_dim, num_kv_heads=1, group=2, seq_lens=[1, 9, 40], q_lens=[1, 9, 3])
    assert_attention_close(host(case, 3), case.reference(), tol=TOL)


@pytest.mark.parametrize("preset", NAMES)
def test_dequant_matches_tq_core_decode(gen, preset):
    """Keys in the rotated domain as for vLLM's presets; Lloyd-Max values in the rotated domain
    too (tq_core decodes them to the coded vectors: rotated back here)."""
    case = make_case(gen, preset, head_dim=64, seq_lens=[16], q_lens=[1], num_kv_heads=2, block_size=16)
    call = prepared(case)
    blk = case.block_table[0, 0].item()
    k_ref, _ = gather_kv(case.kv_cache, torch.tensor([blk]), 16, case.preset, 64, rotated=True)
    _, v_ref = gather_kv(case.kv_cache, torch.tensor([blk]), 16, case.preset, 64)
    for head in range(2):
        k, v = host_module().dequant_block(call.args, blk, head)
        torch.testing.assert_close(torch.from_numpy(k), k_ref[:, head], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(tq_core.rotate(torch.from_numpy(v)), v_ref[:, head], atol=1e-5, rtol=1e-5)


def test_device_kernels_refuse_calibrated_formats(gen):
    case = make_case(gen, "tq_k4v3", seq_lens=[9], q_lens=[1])
    with pytest.raises(PresetError, match="kernel='host' does"):
        tq_sycl.attention(*case.args(), kernel="scalar", **case.extra())
    with pytest.raises(PresetError, match="calibration"):
        tq_sycl.attention(*case.args(), kernel="host")


@pytest.mark.parametrize("field", ["key_first_offset", "key_gain", "value_offset", "value_first_offset", "value_gain"])
def test_a_calibration_tensor_shrunk_after_construction_is_refused(gen, field):
    """Checked where the call takes it, before a build is looked for: CalibrationError names
    the tensor (not torch.stack's RuntimeError, nor a read past it)."""
    case = make_case(gen, "tq_k4v3", seq_lens=[9], q_lens=[1], num_kv_heads=2, head_dim=64)
    getattr(case.calibration, field).resize_(1, case.calibration.head_dim)
    with pytest.raises(
        CalibrationError, match=rf"calibration {field}: shape \(1, 64\) differs from key_offset's \(2, 64\)"
    ):
        tq_sycl.attention(*case.args(), kernel="host", **case.extra())


def test_cxx_requires_the_calibration_pointers(gen):
    call = prepared(make_case(gen, "tq_k4v4", seq_lens=[9], q_lens=[1]))
    with pytest.raises(ValueError, match="needs value_centroids and calibration"):
        host_module().attention(call.args | {"calibration": 0})
    with pytest.raises(ValueError, match="zero_offset must be -1 exactly"):
        host_module().attention(call.args | {"calibrated": 0})
