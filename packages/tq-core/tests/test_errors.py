"""Every argument check raises a TQError subclass that is also a ValueError and names the argument."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

import tq_core
from tq_core import attention, decode_kv, encode_kv, from_vllm_cache, get_preset, store, to_vllm_cache
from tq_core.checks import check_attention_args
from tq_core.contract import check_host_metadata
from tq_core.errors import DeviceError, DtypeError, LayoutError, PresetError, RangeError, ShapeError, TQError

NAME = "turboquant_k3v4_nc"
D = 64
SLOT = 62  # k3v4_nc at d=64
META = torch.device("meta")


@contextlib.contextmanager
def raises(exc: type[TQError], match: str):
    """pytest.raises that also checks the contract: a TQError that is also a ValueError."""
    with pytest.raises(exc, match=match) as info:
        yield info
    assert isinstance(info.value, TQError) and isinstance(info.value, ValueError)


def test_error_hierarchy():
    for cls in (PresetError, ShapeError, DtypeError, DeviceError, LayoutError, RangeError):
        assert issubclass(cls, TQError) and issubclass(cls, ValueError)
        assert getattr(tq_core, cls.__name__) is cls  # exported at the top level too
    assert issubclass(tq_core.BackendUnavailableError, TQError)
    assert issubclass(tq_core.BackendUnavailableError, RuntimeError)


# ---------------------------------------------------------------- presets


@pytest.mark.parametrize("bad", ["turboquant_2bit", "fp8", "", None, 3])
def test_unknown_preset(bad):
    with raises(PresetError, "preset="):
        get_preset(bad)
    with raises(PresetError, "preset="):
        encode_kv(torch.zeros(1, 1, D), torch.zeros(1, 1, D), bad)


@pytest.mark.parametrize(
    "fields,match",
    [
        (("x", "int4", 4, 4, True), "key_kind"),
        (("x", "fp8", 4, 4, False), "fp8 keys are 8 bits"),
        (("x", "fp8", 8, 4, True), "norm_correction must be False"),
        (("x", "lloyd_max", 5, 4, True), "key_bits=5"),
        (("x", "lloyd_max", 0, 4, True), "key_bits=0"),
        (("x", "lloyd_max", 3.0, 4, True), "key_bits"),
        (("x", "lloyd_max", True, 4, True), "key_bits"),
        (("x", "lloyd_max", 4, 9, True), "value_bits=9"),
        (("x", "lloyd_max", 4, 0, True), "value_bits=0"),
        (("x", "lloyd_max", 4, 4, 1), "norm_correction=1"),
        (("", "fp8", 8, 4, False), "name"),
        ((None, "fp8", 8, 4, False), "name"),
        # well-formed but not implemented by the kernels
        (("custom", "lloyd_max", 2, 4, True), "not a format tq implements"),
        (("custom", "lloyd_max", 4, 3, True), "not a format tq implements"),
        (("custom", "lloyd_max", 3, 4, False), "not a format tq implements"),
        (("custom", "fp8", 8, 3, False), "not a format tq implements"),
        # a shipped format under another name (tq-sycl and vLLM look presets up by name)
        (("k3v4", "lloyd_max", 3, 4, True), "turboquant_k3v4_nc"),
    ],
)
def test_preset_fields_are_validated(fields, match):
    with raises(PresetError, match):
        tq_core.Preset(*fields)


def test_replace_cannot_make_an_unsupported_preset():
    import dataclasses

    with raises(PresetError, "key_bits=2"):
        dataclasses.replace(get_preset(NAME), key_bits=2)


@pytest.mark.parametrize("name", sorted(tq_core.PRESETS))
def test_a_preset_equal_to_a_shipped_one_is_the_shipped_one(name):
    shipped = tq_core.PRESETS[name]
    copy = tq_core.Preset(shipped.name, shipped.key_kind, shipped.key_bits, shipped.value_bits, shipped.norm_correction)
    assert copy == shipped and get_preset(copy) is shipped


def test_a_preset_altered_behind_frozen_is_refused():
    p = tq_core.Preset("turboquant_k3v4_nc", "lloyd_max", 3, 4, True)
    object.__setattr__(p, "key_bits", 2)
    with raises(PresetError, "preset="):
        get_preset(p)
    with raises(PresetError, "preset="):
        encode_kv(torch.zeros(1, 1, D), torch.zeros(1, 1, D), p)


def test_preset_table_is_read_only():
    with pytest.raises(TypeError):
        tq_core.PRESETS["turboquant_2bit"] = get_preset(NAME)  # type: ignore[index]
    assert sorted(tq_core.PRESETS) == sorted(
        ["turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"]
    )


@pytest.mark.parametrize("d", [32, 80, 96, 100, 1024, "128", 128.0])
def test_unsupported_head_dim(d):
    with raises(PresetError, "head_dim"):
        get_preset(NAME).layout(d)


@pytest.mark.parametrize("bs,heads,match", [(0, 1, "block_size"), (16, 0, "num_kv_heads"), ("16", 1, "block_size")])
def test_block_layout_arguments(bs, heads, match):
    with raises(ShapeError, match):
        get_preset(NAME).block_layout(D, bs, heads)


@pytest.mark.parametrize("bs", [1, 2, 4])
def test_block_size_too_small_for_aligned_fields(bs):
    with raises(ShapeError, "block_size"):
        get_preset("turboquant_3bit_nc").block_layout(128, bs)


# ---------------------------------------------------------------- encode / decode


def _kv(n=2, h=1, d=D, dtype=torch.float32):
    return torch.zeros(n, h, d, dtype=dtype), torch.zeros(n, h, d, dtype=dtype)


def test_encode_key_checks():
    k, v = _kv()
    with raises(ShapeError, "key"):
        encode_kv(k.tolist(), v, NAME)
    with raises(ShapeError, "key"):
        encode_kv(k[0], v[0], NAME)
    with raises(DtypeError, "key"):
        encode_kv(k.to(torch.int32), v, NAME)
    with raises(DtypeError, "key"):
        encode_kv(k.double(), v, NAME)
    with raises(PresetError, "head_dim"):
        encode_kv(*_kv(d=96), NAME)


def test_encode_value_checks():
    k, v = _kv()
    with raises(DtypeError, "value"):
        encode_kv(k, v.double(), NAME)
    with raises(ShapeError, "value"):
        encode_kv(k, v[:1], NAME)
    with raises(ShapeError, "value"):
        encode_kv(k, v[..., :32], NAME)
    with raises(DeviceError, "value"):
        encode_kv(k, v.to(META), NAME)


def test_decode_checks():
    slots = encode_kv(*_kv(), NAME)
    with raises(DtypeError, "slots"):
        decode_kv(slots.to(torch.int8), NAME, D)
    with raises(ShapeError, "slots"):
        decode_kv(slots[0], NAME, D)
    with raises(ShapeError, "slots"):
        decode_kv(slots[..., :-2], NAME, D)
    with raises(ShapeError, "slots"):
        decode_kv(slots, NAME, 128)  # right head_dim for another slot size
    with raises(PresetError, "head_dim"):
        decode_kv(slots, NAME, 100)
    with raises(PresetError, "preset"):
        decode_kv(slots, "turboquant_9bit", D)


# ---------------------------------------------------------------- store


def _cache(nb=2, bs=16, h=1, slot=SLOT, dtype=torch.uint8):
    return torch.zeros(nb, bs, h, slot, dtype=dtype)


def test_store_cache_checks():
    k, v = _kv()
    sm = torch.tensor([0, 1])
    with raises(DtypeError, "kv_cache"):
        store(k, v, _cache(dtype=torch.int8), sm, NAME)
    with raises(ShapeError, "kv_cache"):
        store(k, v, _cache()[0], sm, NAME)
    with raises(ShapeError, "kv_cache"):
        store(k, v, _cache(slot=SLOT + 2), sm, NAME)  # slot size of no head_dim
    with raises(ShapeError, "kv_cache"):
        store(k, v, _cache(h=2), sm, NAME)  # kv heads differ from key's
    with raises(ShapeError, "kv_cache"):
        store(k, v, _cache(nb=0), sm, NAME)
    with raises(DeviceError, "kv_cache"):
        store(k, v, _cache().to(META), sm, NAME)
    with raises(ShapeError, "block_size"):
        store(k, v, _cache(bs=2), sm, NAME)
    with raises(LayoutError, "kv_cache"):
        store(*_kv(h=2), _cache(h=4)[:, :, :2], sm, NAME)
    with raises(LayoutError, "kv_cache"):
        store(k, v, _cache(nb=1).expand(3, -1, -1, -1), sm, NAME)  # blocks overlap


def test_store_slot_mapping_checks():
    k, v = _kv(n=3)
    cache = _cache()  # 32 slots
    with raises(DtypeError, "slot_mapping"):
        store(k, v, cache, torch.tensor([0.0, 1.0, 2.0]), NAME)
    with raises(DtypeError, "slot_mapping"):
        store(k, v, cache, torch.tensor([0, 1, 2], dtype=torch.int16), NAME)
    with raises(ShapeError, "slot_mapping"):
        store(k, v, cache, torch.tensor([0, 1]), NAME)
    with raises(ShapeError, "slot_mapping"):
        store(k, v, cache, torch.tensor([[0, 1, 2]]), NAME)
    with raises(DeviceError, "slot_mapping"):
        store(k, v, cache, torch.tensor([0, 1, 2], device=META), NAME)
    with raises(RangeError, "slot_mapping"):
        store(k, v, cache, torch.tensor([0, 32, 1]), NAME)
    with raises(RangeError, "slot_mapping"):
        store(k, v, cache, torch.tensor([5, -1, 5]), NAME)
    before = cache.clone()
    store(k, v, cache, torch.tensor([-1, -1, -1]), NAME)  # repeated padding is fine
    assert torch.equal(cache, before)


def test_store_key_checks():
    cache = _cache()
    with raises(PresetError, "head_dim"):
        store(*_kv(d=100), cache, torch.tensor([0, 1]), NAME)
    with raises(DtypeError, "key"):
        store(*_kv(dtype=torch.float64), cache, torch.tensor([0, 1]), NAME)
    with raises(PresetError, "preset"):
        store(*_kv(), cache, torch.tensor([0, 1]), "turboquant")


# ---------------------------------------------------------------- conversions


def test_conversion_checks():
    with raises(ShapeError, "kv_cache"):
        to_vllm_cache(_cache(slot=61), NAME)
    with raises(DtypeError, "kv_cache"):
        from_vllm_cache(_cache(dtype=torch.float16), NAME)
    with raises(ShapeError, "kv_cache"):
        from_vllm_cache(_cache()[0], NAME)
    with raises(PresetError, "preset"):
        to_vllm_cache(_cache(), "nope")


# ---------------------------------------------------------------- attention


def _attn_args(**over):
    args = {
        "query": torch.zeros(3, 4, D),
        "kv_cache": _cache(nb=3, h=2),
        "block_table": torch.tensor([[0, 1], [2, 0]], dtype=torch.int32),
        "seq_lens": torch.tensor([20, 2], dtype=torch.int32),
        "query_start_loc": torch.tensor([0, 2, 3], dtype=torch.int32),
        "preset": NAME,
        "scale": 1 / math.sqrt(D),
        "out": None,
    }
    args.update(over)
    return args


def test_attention_valid_args_pass():
    out = attention(**_attn_args())
    assert out.shape == (3, 4, D) and torch.isfinite(out).all()


T = torch.tensor


@pytest.mark.parametrize(
    "over,exc,match",
    [
        ({"query": torch.zeros(3, 4 * D)}, ShapeError, "query"),
        ({"query": torch.zeros(3, 4, D, dtype=torch.int32)}, DtypeError, "query"),
        ({"query": torch.zeros(3, 4, D, dtype=torch.float64)}, DtypeError, "query"),
        ({"query": [[0.0]]}, ShapeError, "query"),
        ({"query": torch.zeros(3, 4, 96)}, PresetError, "head_dim"),
        ({"query": torch.zeros(3, 3, D)}, ShapeError, "query"),  # 3 q heads, 2 kv heads
        ({"preset": "turboquant_k2v2"}, PresetError, "preset"),
        ({"kv_cache": _cache(nb=3, h=2).float()}, DtypeError, "kv_cache"),
        ({"kv_cache": _cache(nb=3, h=2)[0]}, ShapeError, "kv_cache"),
        ({"kv_cache": _cache(nb=3, h=2, slot=SLOT + 8)}, ShapeError, "kv_cache"),
        ({"kv_cache": _cache(nb=3, h=2).to(META)}, DeviceError, "kv_cache"),
        ({"kv_cache": _cache(nb=3, h=4)[:, :, :2]}, LayoutError, "kv_cache"),
        ({"block_table": T([[0.0, 1.0], [2.0, 0.0]])}, DtypeError, "block_table"),
        ({"block_table": T([0, 1], dtype=torch.int32)}, ShapeError, "block_table"),
        ({"block_table": T([[0, 1]], dtype=torch.int32)}, ShapeError, "block_table"),  # fewer rows than requests
        ({"block_table": T([[0, 1], [2, 0]], dtype=torch.int32, device=META)}, DeviceError, "block_table"),
        ({"seq_lens": T([20.0, 2.0])}, DtypeError, "seq_lens"),
        ({"seq_lens": T([[20, 2]], dtype=torch.int32)}, ShapeError, "seq_lens"),
        ({"seq_lens": T([20, 2], dtype=torch.int32, device=META)}, DeviceError, "seq_lens"),
        ({"query_start_loc": T([0, 2], dtype=torch.int32)}, ShapeError, "query_start_loc"),
        ({"query_start_loc": T([0.0, 2.0, 3.0])}, DtypeError, "query_start_loc"),
        ({"query_start_loc": T([0, 2, 3], dtype=torch.int32, device=META)}, DeviceError, "query_start_loc"),
        ({"scale": 0.0}, RangeError, "scale"),
        ({"scale": -0.125}, RangeError, "scale"),
        ({"scale": math.nan}, RangeError, "scale"),
        ({"scale": math.inf}, RangeError, "scale"),
        ({"scale": True}, RangeError, "scale"),
        ({"scale": "0.125"}, RangeError, "scale"),
        ({"scale": None}, RangeError, "scale"),
        ({"scale": torch.tensor(0.125)}, RangeError, "scale"),
        # issue 29: finite in float64, but inf or 0 in float32, where every backend computes
        ({"scale": 1e300}, RangeError, "scale=1e[+]300"),
        ({"scale": 3.5e38}, RangeError, "scale=3.5e[+]38"),
        ({"scale": 1e-50}, RangeError, "scale=1e-50"),
        # issue 29: 0 kv heads was a ZeroDivisionError (the GQA check divided first)
        ({"kv_cache": _cache(nb=3, h=0)}, ShapeError, "kv_cache: has 0 kv heads"),
        ({"out": torch.zeros(3, 4, D + 1)}, ShapeError, "out"),
        ({"out": torch.zeros(2, 4, D)}, ShapeError, "out"),
        ({"out": torch.zeros(3, 4, D, dtype=torch.int32)}, DtypeError, "out"),
        ({"out": torch.zeros(3, 4, D, device=META)}, DeviceError, "out"),
        ({"out": torch.zeros(3, 4, 2 * D)[..., ::2]}, LayoutError, "out: last-dim stride 2"),
        ({"out": torch.zeros(3, D, 4).transpose(1, 2)}, LayoutError, "out: last-dim stride 4"),
        ({"out": torch.zeros(1, 4, D).expand(3, -1, -1)}, LayoutError, "out: stride 0 in dim 0"),
        ({"out": torch.zeros(3, 1, D).expand(-1, 4, -1)}, LayoutError, "out: stride 0 in dim 1"),
        # metadata values
        ({"query_start_loc": T([1, 2, 3], dtype=torch.int32)}, RangeError, "query_start_loc"),
        ({"query_start_loc": T([0, 3, 2], dtype=torch.int32)}, RangeError, "query_start_loc"),
        ({"query_start_loc": T([0, 2, 4], dtype=torch.int32)}, RangeError, "query_start_loc"),  # past 3 query rows
        ({"seq_lens": T([20, -1], dtype=torch.int32)}, RangeError, "seq_lens"),
        ({"seq_lens": T([20, 0], dtype=torch.int32)}, RangeError, r"q_len=1 exceeds seq_lens\[1\]=0"),
        ({"query_start_loc": T([0, 0, 3], dtype=torch.int32)}, RangeError, r"q_len=3 exceeds seq_lens\[1\]=2"),
        ({"seq_lens": T([33, 2], dtype=torch.int32)}, RangeError, r"seq_lens\[0\]=33 exceeds block_table capacity"),
        ({"block_table": T([[0, 3], [2, 0]], dtype=torch.int32)}, RangeError, "block_table: block id 3"),
        ({"block_table": T([[0, 1], [-1, 0]], dtype=torch.int32)}, RangeError, "block_table: block id -1"),
    ],
)
def test_attention_checks(over, exc, match):
    with raises(exc, match):
        attention(**_attn_args(**over))


def test_attention_and_store_on_meta_tensors_raise_device_error():
    # issue 29: every tensor on the meta device (no data): attention raised
    # NotImplementedError, store RuntimeError
    args = _attn_args()
    for name in ("query", "kv_cache", "block_table", "seq_lens", "query_start_loc"):
        args[name] = args[name].to(META)
    with raises(DeviceError, "query: is a meta tensor"):
        attention(**args)
    k, v = _kv()
    with raises(DeviceError, "key: is a meta tensor"):
        store(k.to(META), v.to(META), _cache().to(META), torch.tensor([0, 1], device=META), NAME)
    with raises(DeviceError, "kv_cache: is a meta tensor"):
        tq_core.gather_kv(_cache().to(META), torch.tensor([0], device=META), 1, NAME)


@pytest.mark.parametrize("bad,match", [(-1, "block id -1"), (2, "block id 2"), (99, "block id 99")])
def test_gather_kv_checks_the_block_ids_it_reads(bad, match, gen):
    # issue 29: -1 silently read the last block, an id past the end raised a bare IndexError
    cache = _cache(nb=2)
    kv = torch.randn(32, 1, D, generator=gen)
    store(kv, kv, cache, torch.arange(32), NAME)
    with raises(RangeError, f"block_row: {match} is outside the cache's 2 blocks"):
        tq_core.gather_kv(cache, torch.tensor([0, bad], dtype=torch.int32), 20, NAME)
    # entries past the ones read are not looked at; the keys read are those of block 0
    k, _ = tq_core.gather_kv(cache, torch.tensor([0, bad], dtype=torch.int32), 16, NAME)
    k0, _ = tq_core.gather_kv(cache, torch.tensor([0], dtype=torch.int32), 16, NAME)
    assert torch.equal(k, k0)
    assert tq_core.gather_kv(cache, torch.tensor([bad], dtype=torch.int32), 0, NAME)[0].shape == (0, 1, D)


def test_attention_ignores_unused_block_table_entries(gen):
    # request 1 has 2 tokens: only its first block id is read; request 0 uses both of its blocks
    cache = _cache(nb=3, h=2)
    kv = torch.randn(3 * 16, 2, D, generator=gen)
    store(kv, kv.flip(0), cache, torch.arange(3 * 16), NAME)
    query = torch.randn(3, 4, D, generator=gen)
    out = attention(
        **_attn_args(query=query, kv_cache=cache, block_table=T([[0, 1, 99], [2, -5, 1000]], dtype=torch.int32))
    )
    expected = attention(**_attn_args(query=query, kv_cache=cache))  # block_table [[0, 1], [2, 0]]
    assert torch.isfinite(out).all() and torch.equal(out, expected)


def test_out_may_be_a_strided_view_and_nothing_outside_it_changes(gen):
    # rows 1..3 and heads 1..4 of a larger buffer: accepted, written exactly there
    cache = _cache(nb=3, h=2)
    kv = torch.randn(3 * 16, 2, D, generator=gen)
    store(kv, kv.flip(0), cache, torch.arange(3 * 16), NAME)
    query = torch.randn(3, 4, D, generator=gen)
    expected = attention(**_attn_args(query=query, kv_cache=cache))
    buf = torch.full((5, 6, D), -123.25)
    out = buf[1:4, 1:5]
    assert not out.is_contiguous()
    result = attention(**_attn_args(query=query, kv_cache=cache, out=out))
    assert result.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    outside = torch.ones_like(buf, dtype=torch.bool)
    outside[1:4, 1:5] = False
    assert bool((buf[outside] == -123.25).all())


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4"])
def test_max_q_len_hint_is_validated(bad):
    args = _attn_args()
    args.pop("out")
    with raises(RangeError, "max_q_len"):
        check_attention_args(**args, max_q_len=bad)
    with raises(RangeError, "max_q_len"):
        check_attention_args(**args, check_values=False, max_q_len=bad)


def test_max_q_len_limit_names_q_len():
    args = _attn_args()
    args.pop("out")
    with raises(RangeError, "q_len=2 exceeds this implementation's limit of 1"):
        check_attention_args(**args, max_q_len=1)
    check_attention_args(**args, max_q_len=2)
    check_attention_args(**args, check_values=False, max_q_len=1)  # value checks skipped


# ---------------------------------------------------------------- lower-level helpers (plain ValueError)


def test_codebook_and_bitpack_argument_errors():
    from tq_core.bitpack import pack_codes, unpack_codes

    with pytest.raises(ValueError, match="bits"):
        tq_core.get_codebook(7)
    with pytest.raises(ValueError, match="bits"):
        tq_core.get_codebook(5, "beta", 128)  # beta: 1..4 bits
    with pytest.raises(ValueError, match="d="):
        tq_core.get_codebook(3, "beta", 100)
    with pytest.raises(ValueError, match="source"):
        tq_core.get_codebook(3, "laplace")
    with pytest.raises(ValueError, match="d="):
        tq_core.lloyd_max(2, "beta", 96)
    with pytest.raises(ValueError, match="fp8"):
        tq_core.key_codebook("turboquant_k8v4", 128)
    with pytest.raises(ValueError, match="bits"):
        pack_codes(torch.zeros(8, dtype=torch.int64), 0)
    with raises(DtypeError, "codes"):
        pack_codes(torch.zeros(8), 3)
    with raises(DtypeError, "packed"):
        unpack_codes(torch.zeros(3, dtype=torch.int32), 3, 8)
    with raises(ShapeError, "packed"):
        unpack_codes(torch.zeros(4, dtype=torch.uint8), 3, 8)


# ---------------------------------------------------------------- host-side metadata check

# (seq_lens, query_start_loc) over the 3 query rows of _attn_args; None: valid
HOST_CASES = [
    (([20, 2], [0, 2, 3]), None),
    (([20, 2], [0, 2, 2]), None),  # fewer rows used than the query has
    (([0, 2], [0, 0, 1]), None),  # an idle request (q_len 0, seq_len 0)
    (([32, 32], [0, 1, 2]), None),  # exactly the table's capacity
    (([20, 2], [1, 2, 3]), "query_start_loc: must start at 0"),
    (([20, 2], [0, 3, 2]), "query_start_loc: must be non-decreasing"),
    (([20, 2], [0, 2, 4]), "query_start_loc: ends at 4, past the 3 query tokens"),
    (([20, -1], [0, 2, 3]), "seq_lens"),
    (([20, 0], [0, 2, 3]), r"q_len=1 exceeds seq_lens\[1\]=0"),
    (([20, 2], [0, 0, 3]), r"q_len=3 exceeds seq_lens\[1\]=2"),
    (([33, 2], [0, 2, 3]), r"seq_lens\[0\]=33 exceeds block_table capacity 2 blocks x 16"),
]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("lens,match", HOST_CASES)
def test_host_metadata_check_agrees_with_the_device_check(lens, match, dtype):
    sl, qsl = (torch.tensor(x, dtype=dtype) for x in lens)
    args = _attn_args(seq_lens=sl, query_start_loc=qsl)
    args.pop("out")
    host = {"num_query_rows": 3, "block_table_width": 2, "block_size": 16}
    if match is None:
        check_attention_args(**args)  # the reference: the device-side value check
        check_host_metadata(sl, qsl, **host)
        return
    with raises(RangeError, match):
        check_attention_args(**args)
    with raises(RangeError, match):
        check_host_metadata(sl, qsl, **host)


def test_host_metadata_check_reads_strided_views_by_value():
    big_sl = torch.tensor([20, 99, 2, 99], dtype=torch.int32)
    big_qsl = torch.tensor([0, 7, 2, 7, 3], dtype=torch.int32)
    host = {"num_query_rows": 3, "block_table_width": 2, "block_size": 16}
    check_host_metadata(big_sl[::2], big_qsl[::2], **host)
    with raises(RangeError, "seq_lens"):
        check_host_metadata(big_sl[1::2], big_qsl[::2], **host)  # 99 > 32


def test_host_metadata_check_max_q_len():
    sl, qsl = T([20, 2]), T([0, 2, 3])
    host = {"num_query_rows": 3, "block_table_width": 2, "block_size": 16}
    check_host_metadata(sl, qsl, **host, max_q_len=2)
    with raises(RangeError, "q_len=2 exceeds this implementation's limit of 1"):
        check_host_metadata(sl, qsl, **host, max_q_len=1)


@pytest.mark.parametrize(
    "over,exc,match",
    [
        ({"seq_lens_cpu": T([20, 2], device=META)}, DeviceError, "expected a CPU tensor"),
        ({"query_start_loc_cpu": T([0, 2, 3], device=META)}, DeviceError, "expected a CPU tensor"),
        ({"seq_lens_cpu": T([20.0, 2.0])}, DtypeError, "seq_lens"),
        ({"seq_lens_cpu": [20, 2]}, ShapeError, "seq_lens"),
        ({"query_start_loc_cpu": T([0, 2])}, ShapeError, "query_start_loc"),
        ({"num_query_rows": -1}, RangeError, "num_query_rows"),
        ({"num_query_rows": 3.0}, RangeError, "num_query_rows"),
        ({"block_table_width": -2}, RangeError, "block_table_width"),
        ({"block_size": 0}, RangeError, "block_size"),
        ({"max_q_len": 0}, RangeError, "max_q_len"),
    ],
)
def test_host_metadata_check_arguments(over, exc, match):
    args = {
        "seq_lens_cpu": T([20, 2]),
        "query_start_loc_cpu": T([0, 2, 3]),
        "num_query_rows": 3,
        "block_table_width": 2,
        "block_size": 16,
    }
    args.update(over)
    with raises(exc, match):
        check_host_metadata(**args)
