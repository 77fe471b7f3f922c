"""tq_vllm.calibrated: choosing a calibrated format through vLLM's additional config (no vLLM)."""

from __future__ import annotations

import pytest
import torch

from tq_core import Calibration, LayerCalibration, PresetError
from tq_vllm.calibrated import (
    CARRIER,
    format_choice,
    kv_head_range,
    layer_calibration,
    layer_index,
    token_positions,
)


def test_format_choice_from_additional_config():
    assert format_choice(None) is None and format_choice({}) is None and format_choice({"other": 1}) is None
    choice = format_choice({"tq_format": "tq_k4v3", "tq_calibration": "/x.cal"})
    assert choice is not None and choice.preset.name == "tq_k4v3" and choice.calibration_path == "/x.cal"
    with pytest.raises(PresetError, match="expected one of"):
        format_choice({"tq_format": "turboquant_k3v4_nc", "tq_calibration": "/x.cal"})
    assert not choice.uncalibrated
    # "none": no file, the identity calibration (the error for a missing one offers it)
    none = format_choice({"tq_format": "tq_k4v4", "tq_calibration": "none"})
    assert none is not None and none.uncalibrated
    with pytest.raises(PresetError, match=r"needs 'tq_calibration'.*or 'none' to serve without one"):
        format_choice({"tq_format": "tq_k4v4"})


@pytest.mark.parametrize("bad", [["tq_k4v3"], {"tq_k4v3": 1}, {"tq_k4v3"}, None, 3, b"tq_k4v3", ("tq_k4v3",)])
def test_format_choice_refuses_a_format_that_is_not_a_name(bad):
    """Any tq_format but one of the names raises PresetError naming the accepted values (a
    list, dict or set raised TypeError: unhashable)."""
    with pytest.raises(PresetError, match=r"tq_format=.*: expected one of \['tq_k4v3', 'tq_k4v4', 'tq_k6v5'\]"):
        format_choice({"tq_format": bad, "tq_calibration": "/x.cal"})


@pytest.mark.parametrize("name", sorted(CARRIER))
def test_carrier_holds_the_slot(name):
    choice = format_choice({"tq_format": name, "tq_calibration": "/x.cal"})
    assert choice is not None
    for d in (64, 128, 256):
        choice.check_carrier(CARRIER[name], d)
        choice.check_carrier("turboquant_k8v4", d)  # more bytes: fits, wastes the difference
    with pytest.raises(PresetError, match=f"needs --kv-cache-dtype {CARRIER[name]}"):
        choice.check_carrier("turboquant_3bit_nc", 64)  # 54-byte slots
    with pytest.raises(PresetError, match="needs --kv-cache-dtype"):
        choice.check_carrier("auto", 64)


def test_layer_index():
    assert layer_index("model.layers.7.self_attn.attn") == 7
    assert layer_index("language_model.model.layers.12.self_attn.attn") == 12
    with pytest.raises(PresetError, match="cannot tell the decoder layer"):
        layer_index("model.decoder.attn")


def test_kv_head_range_under_tensor_parallelism():
    assert [kv_head_range(3, 1, r, 3) for r in range(3)] == [(0, 1), (1, 2), (2, 3)]
    assert [kv_head_range(8, 4, r, 2) for r in range(2)] == [(0, 4), (4, 8)]
    assert kv_head_range(8, 8, 0, 1) == (0, 8)
    assert [kv_head_range(2, 1, r, 4) for r in range(4)] == [(0, 1), (0, 1), (1, 2), (1, 2)]  # replicated
    with pytest.raises(PresetError, match="does not divide"):
        kv_head_range(3, 2, 0, 2)


def test_layer_calibration_takes_the_ranks_heads():
    def lay(i: int) -> LayerCalibration:
        base = torch.arange(3 * 4, dtype=torch.float32).view(3, 4) + 100 * i
        return LayerCalibration(base, base + 1, base + 1, base, base, base + 2)

    cal = Calibration((lay(0), lay(1)))
    got = layer_calibration(cal, "model.layers.1.self_attn.attn", 1, 2, 3, "cpu")
    assert torch.equal(got.key_offset, lay(1).key_offset[2:3]) and torch.equal(got.value_gain, lay(1).value_gain[2:3])


def test_an_uncalibrated_choice_gives_each_layer_the_identity():
    """``"tq_calibration": "none"``: every layer's calibration on a rank is offsets 0 and gains
    1 for the rank's kv heads, and no file is read."""
    choice = format_choice({"tq_format": "tq_k4v3", "tq_calibration": "none"})
    got = choice.layer_calibration("model.layers.7.self_attn.attn", 2, 64, 1, 3, "cpu")
    zero, one = torch.zeros(2, 64), torch.ones(2, 64)
    for name in ("key_offset", "key_first_offset", "value_offset", "value_first_offset"):
        assert torch.equal(getattr(got, name), zero), name
    assert torch.equal(got.key_gain, one) and torch.equal(got.value_gain, one)


def test_token_positions_against_a_loop():
    qsl = torch.tensor([0, 1, 4, 4, 9], dtype=torch.int32)
    seq_lens = torch.tensor([10, 3, 7, 5], dtype=torch.int32)
    want = []
    for r in range(4):
        q_len = int(qsl[r + 1] - qsl[r])
        want += [int(seq_lens[r]) - q_len + j for j in range(q_len)]
    got = token_positions(qsl, seq_lens, 4)
    assert got.dtype == torch.int32 and got.tolist() == want == [9, 0, 1, 2, 0, 1, 2, 3, 4]
