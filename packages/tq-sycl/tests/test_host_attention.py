"""The host core (tq_sycl._host: the SYCL kernels' shared headers on the CPU) vs tq_core.attention."""

from __future__ import annotations

import math

import pytest
import torch
from cases import make_case, prepared, randint

import tq_core
import tq_sycl
from tq_core.contract import KernelFields, check_attention_args, gather_kv
from tq_core.errors import DeviceError, LayoutError, PresetError, RangeError, ShapeError
from tq_core.testing import assert_attention_close, ragged_lengths
from tq_sycl import kernel_args
from tq_sycl.errors import KernelChoiceError
from tq_sycl.extensions import host_module

PRESETS = sorted(tq_core.PRESETS)
# float32 everywhere; differences come from summation order and the rotated-domain dot
# product (query rotated instead of keys), both ~1e-6 on outputs of magnitude ~1
TOL = 2e-5


def host(case, out=None, num_splits=None):
    return tq_sycl.attention(*case.args(), out=out, kernel="host", num_splits=num_splits)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("group", [1, 4, 8])
def test_ragged_decode_and_verify(gen, preset, group):
    seq_lens, q_lens = ragged_lengths(gen, num_reqs=5, max_q=8, max_seq=90)
    case = make_case(
        gen, preset, group=group, block_size=[16, 32][randint(gen, 0, 1)], seq_lens=seq_lens, q_lens=q_lens
    )
    splits = randint(gen, 1, 5)
    got = host(case, num_splits=splits)
    assert_attention_close(got, case.reference(), tol=TOL, what=f"num_splits={splits}")


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("head_dim", [64, 256, 512])
def test_head_dims(gen, preset, head_dim):
    case = make_case(gen, preset, head_dim=head_dim, num_kv_heads=1, group=2, seq_lens=[23, 40], q_lens=[1, 4])
    assert_attention_close(host(case, num_splits=2), case.reference(), tol=TOL)


@pytest.mark.parametrize("preset", PRESETS)
def test_odd_lengths_and_full_prefill(gen, preset):
    # lengths off every tile/block boundary; q_len == seq_len is a whole prompt
    seq_lens = [1, 15, 17, 33, 47]
    q_lens = [1, 15, 3, 33, 2]
    case = make_case(gen, preset, block_size=16, group=3, num_kv_heads=2, seq_lens=seq_lens, q_lens=q_lens)
    assert_attention_close(host(case, num_splits=3), case.reference(), tol=TOL)


@pytest.mark.parametrize("preset", PRESETS)
def test_split_counts_agree_and_masked_splits_are_harmless(gen, preset):
    # 64 splits of a 20-token sequence: most splits see nothing at all, and for the first
    # verify rows some splits are entirely causal-masked; none may contribute a NaN
    case = make_case(gen, preset, seq_lens=[20, 70], q_lens=[6, 1], group=4)
    ref = case.reference()
    outs = [host(case, num_splits=s) for s in (1, 2, 7, 64)]
    for s, o in zip((1, 2, 7, 64), outs, strict=True):
        assert torch.isfinite(o).all(), f"num_splits={s}"
        assert_attention_close(o, ref, tol=TOL, what=f"num_splits={s}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes(gen, dtype):
    preset = PRESETS[randint(gen, 0, len(PRESETS) - 1)]
    case = make_case(gen, preset, seq_lens=[31, 9], q_lens=[4, 1], dtype=dtype)
    got = host(case, num_splits=2)
    assert got.dtype == dtype
    # both round the same float32 result once to `dtype`: at most one rounding step apart,
    # which is below eps times the largest output
    eps = torch.finfo(dtype).eps
    assert_attention_close(got, case.reference(), tol=2 * eps)


def test_nan_poisoned_out_rows_past_the_last_request_stay_untouched(gen):
    case = make_case(gen, "turboquant_k3v4_nc", seq_lens=[12, 30], q_lens=[2, 3])
    extra = 3
    query = torch.cat([case.query, torch.randn(extra, *case.query.shape[1:], generator=gen)])
    case.query = query
    out = torch.full_like(query, float("nan"))
    got = host(case, out=out, num_splits=2)
    assert got is out
    n = int(case.query_start_loc[-1])
    assert torch.isfinite(out[:n]).all(), "a covered row still holds NaN"
    assert torch.isnan(out[n:]).all(), "rows past query_start_loc[-1] were written"
    assert_attention_close(out[:n], case.reference()[:n], tol=TOL)


def test_strided_views(gen):
    # vLLM's head-major cache seen through transpose(1, 2), a query slice of a wider
    # tensor, an output with gaps between heads and an int64 block table with extra columns
    preset = PRESETS[randint(gen, 0, len(PRESETS) - 1)]
    base = make_case(gen, preset, seq_lens=[40, 7], q_lens=[3, 1], num_kv_heads=2, group=2)
    nb, bs, hk, slot = base.kv_cache.shape
    head_major = torch.empty(nb, hk, bs, slot, dtype=torch.uint8)
    head_major.copy_(base.kv_cache.transpose(1, 2))
    # tq's block bytes must stay identical: copy block bytes, not logical elements
    flat = torch.as_strided(base.kv_cache, (nb, bs * hk * slot), (base.kv_cache.stride(0), 1))
    torch.as_strided(head_major, (nb, bs * hk * slot), (head_major.stride(0), 1)).copy_(flat)
    kv_view = head_major.transpose(1, 2)
    wide_q = torch.randn(base.query.shape[0], base.query.shape[1], 2 * base.query.shape[2], generator=gen)
    wide_q[..., : base.query.shape[2]] = base.query
    q_view = wide_q[..., : base.query.shape[2]]
    bt = torch.zeros(base.block_table.shape[0], base.block_table.shape[1] + 5, dtype=torch.int64)
    bt[:, : base.block_table.shape[1]] = base.block_table
    big_out = torch.zeros(q_view.shape[0], q_view.shape[1] + 1, q_view.shape[2])
    out = big_out[:, 1:, :]
    ref = base.reference()
    got = tq_sycl.attention(
        q_view,
        kv_view,
        bt,
        base.seq_lens.long(),
        base.query_start_loc.long(),
        preset,
        base.scale,
        out=out,
        kernel="host",
        num_splits=2,
    )
    assert got is out
    assert_attention_close(out, ref, tol=TOL)
    assert (big_out[:, 0] == 0).all()


def test_out_that_kernels_cannot_write_in_place_is_refused(gen):
    # tq_core's contract: out's last dim has stride 1 and no dim of size > 1 has stride 0
    # (an expanded out would put every row on the same storage)
    case = make_case(gen, "turboquant_4bit_nc", seq_lens=[18], q_lens=[2])
    storage = torch.zeros(case.query.shape[2], case.query.shape[1], case.query.shape[0])
    with pytest.raises(LayoutError, match="out: last-dim stride"):
        host(case, out=storage.permute(2, 1, 0))
    expanded = torch.zeros(1, *case.query.shape[1:]).expand(case.query.shape)
    with pytest.raises(LayoutError, match="out: stride 0 in dim 0"):
        host(case, out=expanded)
    assert (expanded == 0).all()


def test_empty_batches_and_zero_length_queries(gen):
    case = make_case(gen, "turboquant_k8v4", seq_lens=[10, 5, 8], q_lens=[0, 2, 0])
    assert_attention_close(host(case), case.reference(), tol=TOL)
    none = make_case(gen, "turboquant_k8v4", seq_lens=[], q_lens=[])
    assert host(none).shape == none.query.shape


def test_arguments_are_validated_with_named_errors(gen):
    case = make_case(gen, "turboquant_3bit_nc", seq_lens=[10], q_lens=[2])
    q, kv, bt, sl, qsl, p, scale = case.args()
    with pytest.raises(KernelChoiceError, match="kernel='cuda'"):
        tq_sycl.attention(q, kv, bt, sl, qsl, p, scale, kernel="cuda")
    with pytest.raises(PresetError, match="preset="):
        tq_sycl.attention(q, kv, bt, sl, qsl, "turboquant_2bit", scale, kernel="host")
    with pytest.raises(RangeError, match=r"q_len=2 exceeds seq_lens\[0\]=1"):
        tq_sycl.attention(q, kv, bt, torch.tensor([1]), qsl, p, scale, kernel="host")
    with pytest.raises(PresetError, match=r"query.shape\[-1\] \(head_dim\)=96"):
        tq_sycl.attention(q[..., :96], kv, bt, sl, qsl, p, scale, kernel="host")
    with pytest.raises(ShapeError, match="query: expected 3 dims"):
        tq_sycl.attention(q[0], kv, bt, sl, qsl, p, scale, kernel="host")
    with pytest.raises(ValueError, match="num_splits=0"):
        tq_sycl.attention(q, kv, bt, sl, qsl, p, scale, kernel="host", num_splits=0)
    with pytest.raises(DeviceError, match="kernel='host' runs on CPU"):
        tq_sycl.attention(q.to("meta"), kv, bt, sl, qsl, p, scale, kernel="host")


def test_sycl_kernels_without_a_build_say_what_is_missing(gen, monkeypatch):
    monkeypatch.delenv("TQ_SYCL_NIGHTLY_ROOT", raising=False)
    case = make_case(gen, "turboquant_k8v4", seq_lens=[10], q_lens=[1])
    with pytest.raises(tq_core.BackendUnavailableError, match="TQ_SYCL_NIGHTLY_ROOT is not set"):
        tq_sycl.attention(*case.args(), kernel="scalar")
    # argument errors come before backend errors
    q, kv, bt, sl, qsl, p, scale = case.args()
    with pytest.raises(ShapeError, match="query: expected 3 dims"):
        tq_sycl.attention(q[0], kv, bt, sl, qsl, p, scale, kernel="esimd")


# Two fills of the bytes around the cache, query and out views. 0x7F decodes to NaN as an
# fp16 norm/scale and as an fp8 key; a kernel that reads a byte around its inputs gives
# different outputs for the two fills, one that writes around `out` changes its canary.
CANARIES = ((0x7F, float("nan"), 12345.0), (0x00, 0.0, -777.0))


def canary_views(case, fill):
    """The case's cache, query and ``out`` as views inside larger tensors filled with
    ``fill`` (cache byte, query value, out value): ``(kv, query, out, big_out)``."""
    kv_byte, q_value, out_value = fill
    nb = case.kv_cache.shape[0]
    big_kv = torch.full((nb + 4, *case.kv_cache.shape[1:]), kv_byte, dtype=torch.uint8)
    kv = big_kv[2 : 2 + nb]
    kv.copy_(case.kv_cache)
    nq, hq, d = case.query.shape
    big_q = torch.full((nq + 4, hq + 1, d), q_value, dtype=case.query.dtype)
    q = big_q[2 : 2 + nq, 1:]
    q.copy_(case.query)
    big_out = torch.full((nq + 4, hq + 1, d), out_value)
    out = big_out[2 : 2 + nq, 1:]
    out.zero_()
    return kv, q, out, big_out


def run_unchecked(case, kv, q, out, bt, sl, qsl, num_splits):
    """The host core on metadata nobody checked (the device path's default, no TQ_DEBUG)."""
    checked = check_attention_args(q, kv, bt, sl, qsl, case.preset, case.scale, out, check_values=False)
    call = kernel_args.prepare(checked, q, kv, bt, sl, qsl, case.scale, out, num_splits)
    host_module().attention(call.args)
    return call.finish()


def run_with_canaries(case, bt, sl, qsl, num_splits, what):
    """``out`` of the unchecked call, after asserting that it reads no byte around the
    cache and query and writes no byte around ``out``."""
    outs = []
    for fill in CANARIES:
        kv, q, out, big_out = canary_views(case, fill)
        got = run_unchecked(case, kv, q, out, bt, sl, qsl, num_splits)
        assert got is out
        around = torch.ones(big_out.shape, dtype=torch.bool)
        around[2 : 2 + out.shape[0], 1:] = False
        assert (big_out[around] == fill[2]).all(), f"{what}: a byte around out was written"
        outs.append(out.clone())
    # bitwise, NaN included: the result cannot depend on the bytes around the inputs
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32)), (
        f"{what}: the output depends on bytes around the cache or the query (an out-of-bounds read)"
    )
    return outs[0]


def rows_of(case, r: int) -> slice:
    return slice(int(case.query_start_loc[r]), int(case.query_start_loc[r + 1]))


BAD_REQUEST = [
    ("block id = num_blocks", lambda c, bt, sl, qsl: bt.__setitem__((1, 0), c.kv_cache.shape[0])),
    ("block id = -1", lambda c, bt, sl, qsl: bt.__setitem__((1, 1), -1)),
    ("block id = 2**30", lambda c, bt, sl, qsl: bt.__setitem__((1, 0), 1 << 30)),
    ("block id = -2**30", lambda c, bt, sl, qsl: bt.__setitem__((1, 1), -(1 << 30))),
    ("seq_len beyond the table", lambda c, bt, sl, qsl: sl.__setitem__(1, bt.shape[1] * 16 + 100)),
    ("seq_len = 2**31 - 1", lambda c, bt, sl, qsl: sl.__setitem__(1, (1 << 31) - 1)),
    ("negative seq_len", lambda c, bt, sl, qsl: sl.__setitem__(1, -5)),
    ("q_len > seq_len", lambda c, bt, sl, qsl: sl.__setitem__(1, 1)),
]


@pytest.mark.parametrize("preset", ["turboquant_k8v4", "turboquant_k3v4_nc"])
@pytest.mark.parametrize(("what", "corrupt"), BAD_REQUEST, ids=[w for w, _ in BAD_REQUEST])
def test_out_of_range_metadata_of_one_request_touches_nothing_else(gen, preset, what, corrupt):
    # value checks off: request 1's metadata is out of range. The core masks blocks
    # outside the cache and clamps lengths: no byte around the cache, query or out is
    # touched, and the other requests' rows equal tq_core's
    case = make_case(gen, preset, block_size=16, seq_lens=[37, 40, 19], q_lens=[3, 4, 2])
    bt, sl, qsl = case.block_table.clone(), case.seq_lens.clone(), case.query_start_loc.clone()
    corrupt(case, bt, sl, qsl)
    ref = case.reference()
    for splits in (1, 3):
        out = run_with_canaries(case, bt, sl, qsl, splits, what)
        for r in (0, 2):
            assert_attention_close(out[rows_of(case, r)], ref[rows_of(case, r)], tol=TOL, what=f"{what}, req {r}")


BAD_QUERY_START_LOC = [
    ("non-monotone", [0, 5, 2, 9]),
    ("decreasing to the end", [0, 9, 5, 1]),
    ("negative entries", [-7, -3, 4, 9]),
    ("last entry past the query rows", [0, 3, 7, 1 << 20]),
    ("every entry past the query rows", [1 << 20, 1 << 21, 1 << 22, (1 << 31) - 1]),
    ("last entry -1", [0, 3, 7, -1]),
]


@pytest.mark.parametrize(("what", "qsl_values"), BAD_QUERY_START_LOC, ids=[w for w, _ in BAD_QUERY_START_LOC])
def test_out_of_range_query_start_loc_never_writes_outside_out(gen, what, qsl_values):
    # each request's query rows are clamped into [0, num_q_tokens): overlapping or empty
    # requests give unspecified rows inside `out`, never a read or write outside
    case = make_case(gen, "turboquant_4bit_nc", block_size=16, seq_lens=[37, 40, 19], q_lens=[3, 4, 2])
    qsl = torch.tensor(qsl_values, dtype=torch.int32)
    for splits in (1, 4):
        run_with_canaries(case, case.block_table, case.seq_lens, qsl, splits, what)


def test_query_start_loc_past_the_rows_keeps_the_valid_requests(gen):
    # query_start_loc[-1] past the query rows: the last request is cut at num_q_tokens
    case = make_case(gen, "turboquant_k3v4_nc", seq_lens=[30, 25], q_lens=[2, 3])
    qsl = case.query_start_loc.clone()
    qsl[-1] = 1 << 20
    out = run_with_canaries(case, case.block_table, case.seq_lens, qsl, 2, "query_start_loc[-1] = 2**20")
    assert_attention_close(out[rows_of(case, 0)], case.reference()[rows_of(case, 0)], tol=TOL)


def test_strided_index_tensors(gen):
    # a block table that is a column slice with stride 2 of a wider int64 table, and
    # seq_lens / query_start_loc read every other element: read through their strides
    preset = PRESETS[randint(gen, 0, len(PRESETS) - 1)]
    case = make_case(gen, preset, seq_lens=[45, 7, 30], q_lens=[3, 1, 2])
    r, w = case.block_table.shape
    wide = torch.full((r + 1, 2 * w), 1 << 30, dtype=torch.int64)
    wide[1:, ::2] = case.block_table
    bt = wide[1:, ::2]
    sl_wide = torch.full((2 * r,), 1 << 30, dtype=torch.int32)
    sl_wide[::2] = case.seq_lens
    qsl_wide = torch.full((2 * (r + 1),), -(1 << 20), dtype=torch.int64)
    qsl_wide[::2] = case.query_start_loc
    assert not bt.is_contiguous() and sl_wide[::2].stride(0) == 2
    ref = case.reference()
    for check in (True, False):
        out = torch.zeros_like(case.query)
        if check:
            tq_sycl.attention(
                case.query,
                case.kv_cache,
                bt,
                sl_wide[::2],
                qsl_wide[::2],
                preset,
                case.scale,
                out=out,
                kernel="host",
                num_splits=2,
            )
        else:
            run_unchecked(case, case.kv_cache, case.query, out, bt, sl_wide[::2], qsl_wide[::2], 2)
        assert_attention_close(out, ref, tol=TOL, what=f"check_values={check}")


@pytest.mark.parametrize("num_q_heads", [0, -8, 3])
def test_cxx_rejects_head_counts_that_are_not_a_positive_multiple(gen, num_q_heads):
    call = prepared(make_case(gen, "turboquant_k8v4", seq_lens=[10], q_lens=[1]))
    with pytest.raises(ValueError, match="num_q_heads must be a positive multiple of num_kv_heads"):
        host_module().attention(call.args | {"num_q_heads": num_q_heads})


def test_bad_metadata_never_reads_out_of_bounds(gen):
    # value checks off (the device path's default): block ids far outside the cache,
    # negative ids, seq_lens past the table and a query_start_loc past the queries
    case = make_case(gen, "turboquant_k3v4_nc", seq_lens=[30, 20], q_lens=[2, 2])
    call = prepared(case, None, 3, check_values=False)
    call.block_table[0, 0] = 1 << 30
    call.block_table[1, 0] = -7
    call.seq_lens[1] = 10_000
    call.query_start_loc[2] = 1 << 20
    host_module().attention(call.args)  # must not crash; results are unspecified
    assert call.out.shape == case.query.shape


def fields_of(preset: str, head_dim: int, block_size: int, num_kv_heads: int) -> KernelFields:
    p = tq_core.get_preset(preset)
    return p.kernel_fields(p.block_layout(head_dim, block_size, num_kv_heads))


@pytest.mark.parametrize("preset", PRESETS)
def test_cxx_reads_back_the_fields_tq_core_computed(preset):
    # the C++ side derives no layout: it must hold exactly the offsets and widths it is given
    for d in tq_core.SUPPORTED_HEAD_DIMS:
        for bs in (1, 2, 4, 8, 16, 32, 64, 128):
            try:
                fields = fields_of(preset, d, bs, 3)
            except ShapeError:
                continue  # the aligned fields do not fit such a block; tq_core refuses it
            expected = {name: int(getattr(fields, name)) for name in kernel_args.FIELD_NAMES}
            assert host_module().kernel_fields(kernel_args.field_args(fields)) == expected, (preset, d, bs)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"head_dim": 96}, "head_dim must be 64, 128, 256 or 512"),
        ({"key_width": 1}, "smaller than head_dim codes"),
        ({"norm_offset": -1}, "norm_offset must be -1 exactly for fp8 keys"),
        ({"zero_offset": 1 << 20}, "pass head_stride"),
        ({"value_offset": -16}, "pass head_stride"),
        ({"block_size": 0}, "block_size must be >= 1"),
    ],
)
def test_cxx_rejects_fields_that_address_outside_a_head(change, message):
    args = kernel_args.field_args(fields_of("turboquant_k3v4_nc", 128, 16, 2)) | change
    with pytest.raises(ValueError, match=message):
        host_module().kernel_fields(args)


@pytest.mark.parametrize("preset", PRESETS)
def test_dequant_matches_tq_core_decode(gen, preset):
    case = make_case(gen, preset, head_dim=128, seq_lens=[32], q_lens=[1], num_kv_heads=2, block_size=16)
    call = prepared(case)
    for blk in case.block_table[0].tolist()[:2]:
        k_ref, v_ref = gather_kv(case.kv_cache, torch.tensor([blk]), 16, case.preset, 128, rotated=True)
        for head in range(2):
            k, v = host_module().dequant_block(call.args, blk, head)
            torch.testing.assert_close(torch.from_numpy(k), k_ref[:, head], atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(torch.from_numpy(v), v_ref[:, head], atol=1e-6, rtol=1e-6)


def test_number_formats_match_torch_bit_for_bit(gen):
    mod = host_module()
    bits = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    got = torch.from_numpy(mod.half_to_float(bits.view(torch.int16).numpy().view("uint16")))
    ref = bits.float()
    assert torch.equal(torch.isnan(got), torch.isnan(ref))
    assert torch.equal(got[~torch.isnan(ref)], ref[~torch.isnan(ref)])

    fp8 = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    got8 = torch.from_numpy(mod.fp8_to_float(fp8.numpy()))
    ref8 = fp8.view(torch.float8_e4m3fn).float()
    assert torch.equal(torch.isnan(got8), torch.isnan(ref8))
    assert torch.equal(got8[~torch.isnan(ref8)], ref8[~torch.isnan(ref8)])

    # random magnitudes across the half range, exact ties, subnormals, overflow
    x = torch.randn(200_000, generator=gen) * torch.exp2(torch.randint(-30, 18, (200_000,), generator=gen).float())
    ties = (torch.arange(-2048, 2048).float() + 0.5) * 2.0**-10
    edge = torch.tensor([0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e9, -1e9, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 6e-8])
    x = torch.cat([x, ties, edge, torch.tensor([math.inf, -math.inf])])
    got16 = torch.from_numpy(mod.float_to_half(x.numpy()).view("int16"))
    assert torch.equal(got16, x.to(torch.float16).view(torch.int16))
    gotbf = torch.from_numpy(mod.float_to_bf16(x.numpy()).view("int16"))
    assert torch.equal(gotbf, x.to(torch.bfloat16).view(torch.int16))
