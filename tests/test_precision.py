import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from trainmath.memory.activations import AS2B_COEFFICIENT, KORTHIKANTI_LAYER, SBH_COEFFICIENT
from trainmath.precision import (DTYPES, FORMATS, GRADSCALER_DEFAULTS, LossScaler,
                                 activation_coefficients, apply_updates, decimal_digits,
                                 derive_format, float_format, from_finfo, is_mask,
                                 max_safe_scale, overflow_threshold, round_to,
                                 simulate_loss_scaler, underflow_fraction)

TWO = Fraction(2)
FINFO_FORMATS = ["fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2"]
ENCODING = {"fp32": "ieee", "fp16": "ieee", "bf16": "ieee", "fp8-e4m3": "fn", "fp8-e5m2": "ieee"}


def finfo(name):
    dtype = DTYPES[name]
    return np.finfo(dtype) if name in ("fp32", "fp16") else ml_dtypes.finfo(dtype)


# -- the general rules against finfo ----------------------------------------------------

@pytest.mark.parametrize("name", FINFO_FORMATS)
def test_bit_layout_rules_reproduce_finfo(name):
    """derive_format, fed only finfo's nexp and nmant, gives finfo's values exactly."""
    f = finfo(name)
    derived = derive_format(name, int(f.nexp), int(f.nmant), ENCODING[name])
    assert derived.max == Fraction(float(f.max))
    assert derived.smallest_normal == Fraction(float(f.smallest_normal))
    assert derived.smallest_subnormal == Fraction(float(f.smallest_subnormal))
    assert derived.eps == Fraction(float(f.eps))
    assert derived.bits == int(f.bits)
    assert derived.has_inf == FORMATS[name].has_inf
    if not name.startswith("fp8"):  # see test_fp8_decimal_digits_are_stated_not_derived
        assert derived.decimal_digits == int(f.precision)
        assert derived.facts() == FORMATS[name].facts()


def test_fp8_decimal_digits_are_stated_not_derived():
    """ml_dtypes states precision = 1 for fp8; NumPy's rule int(-log10(eps)) gives 0."""
    for name in ("fp8-e4m3", "fp8-e5m2"):
        assert finfo(name).precision == 1 == FORMATS[name].decimal_digits
        f = FORMATS[name]
        derived = derive_format(name, f.exponent_bits, f.mantissa_bits, ENCODING[name])
        assert derived.decimal_digits == 0
        assert derived.facts()[:7] == f.facts()[:7]


def test_decimal_digits_is_numpys_rule():
    for dtype in (np.float16, np.float32, np.float64, np.longdouble):
        f = np.finfo(dtype)
        assert decimal_digits(int(f.nmant)) == f.precision == int(-np.log10(f.eps))


def test_numpy_and_ml_dtypes_finfo_agree_where_both_exist():
    for dtype in (np.float16, np.float32):
        a, b = np.finfo(dtype), ml_dtypes.finfo(dtype)
        for field in ("bits", "nexp", "nmant", "max", "smallest_normal", "smallest_subnormal",
                      "eps", "precision"):
            assert getattr(a, field) == getattr(b, field), field


def test_e4m3fn_is_not_ieee():
    """Micikevicius et al. 2022, Table 1: no infinities, all-ones exponent holds numbers."""
    ieee = derive_format("e4m3", 4, 3, "ieee")
    fn = derive_format("e4m3", 4, 3, "fn")
    assert ieee.max == 240 == Fraction(float(ml_dtypes.finfo(ml_dtypes.float8_e4m3).max))
    assert fn.max == 448 == FORMATS["fp8-e4m3"].max
    assert (fn.smallest_normal, fn.smallest_subnormal) == (TWO**-6, TWO**-9)
    assert from_finfo("e4m3", ml_dtypes.float8_e4m3).facts()[:7] == ieee.facts()[:7]
    assert not FORMATS["fp8-e4m3"].has_inf and FORMATS["fp8-e5m2"].has_inf
    assert np.isnan(round_to(1e6, "fp8-e4m3")) and np.isinf(round_to(1e6, "fp8-e5m2"))


def test_known_values():
    fp16, bf16, fp32 = FORMATS["fp16"], FORMATS["bf16"], FORMATS["fp32"]
    assert (fp16.max, fp16.smallest_normal, fp16.smallest_subnormal, fp16.eps) == (
        65504, TWO**-14, TWO**-24, TWO**-10)
    assert (fp16.exponent_bits, fp16.mantissa_bits, fp16.bias, fp16.bits) == (5, 10, 15, 16)
    assert (bf16.exponent_bits, bf16.mantissa_bits, bf16.eps) == (8, 7, TWO**-7)
    assert bf16.smallest_normal == fp32.smallest_normal == TWO**-126
    assert bf16.max == (2 - TWO**-7) * TWO**127
    assert FORMATS["fp8-e5m2"].max == 57344
    assert [f.sign_bits for f in FORMATS.values()] == [1] * len(FORMATS)


def test_tf32_is_fp32_range_with_fp16_precision():
    tf32 = FORMATS["tf32"]
    assert tf32.source.startswith("derived")
    assert (tf32.exponent_bits, tf32.mantissa_bits, tf32.bits) == (8, 10, 19)
    assert tf32.smallest_normal == FORMATS["fp32"].smallest_normal
    assert tf32.eps == FORMATS["fp16"].eps
    assert tf32.max == (2 - TWO**-10) * TWO**127
    assert tf32.smallest_subnormal == TWO**-136
    assert tf32.decimal_digits == 3 and tf32.has_inf


def test_unknown_format_and_bad_layouts():
    with pytest.raises(ValueError, match="unknown format 'fp4'; accepted: fp32, tf32, fp16"):
        float_format("fp4")
    with pytest.raises(ValueError, match="unknown encoding 'fnuz'; accepted: ieee, fn"):
        derive_format("x", 4, 3, "fnuz")
    with pytest.raises(ValueError, match="exponent_bits must be a positive whole number, got 0"):
        derive_format("x", 0, 3)
    with pytest.raises(ValueError, match="exponent_bits must be at least 2, got 1"):
        derive_format("x", 1, 3)


# -- rounding -------------------------------------------------------------------------

def test_round_to_small_gradients():
    assert round_to(1e-8, "fp16") == 0.0
    assert round_to(1e-8, "bf16") == pytest.approx(1e-8, rel=2**-8)
    assert round_to(1e-8 * 2**16, "fp16") == pytest.approx(1e-8 * 2**16, rel=2**-11)
    assert round_to(2.0**-25, "fp16") == 0.0  # a tie: goes to the even neighbour, zero
    assert round_to(3e-8, "fp16") == 2.0**-24
    out = round_to([1.0, 1 + 2**-11, 1 + 2**-10], "fp16")
    assert isinstance(out, np.ndarray) and out.tolist() == [1.0, 1.0, 1 + 2**-10]


def test_round_to_refuses_tf32():
    with pytest.raises(ValueError, match="format 'tf32' has no NumPy or ml_dtypes dtype"):
        round_to(1.0, "tf32")


@pytest.mark.parametrize("name", ["fp32", "fp16", "bf16", "fp8-e5m2"])
def test_overflow_threshold_is_where_casts_reach_inf(name):
    limit = float(overflow_threshold(name))
    assert np.isinf(round_to(limit, name))
    assert round_to(np.nextafter(limit, 0), name) == float(FORMATS[name].max)


def test_overflow_threshold_values():
    assert overflow_threshold("fp16") == 65520
    assert overflow_threshold("fp8-e5m2") == 57344 + 4096
    # e4m3 has no inf: the tie at 464 goes to 448 (even), anything above is NaN
    assert overflow_threshold("fp8-e4m3") == 464
    assert round_to(464.0, "fp8-e4m3") == 448.0
    assert np.isnan(round_to(np.nextafter(464.0, 1e9), "fp8-e4m3"))


@pytest.mark.parametrize("grad", [0.5, 1.0, 0.137, 3e-5, 1000.0, 65504.0])
def test_max_safe_scale_is_the_last_finite_power_of_two(grad):
    s = max_safe_scale(grad, "fp16")
    assert Fraction(s).numerator & (Fraction(s).numerator - 1) == 0  # a power of two
    assert np.isfinite(round_to(grad * float(s), "fp16"))
    assert np.isinf(round_to(grad * float(s) * 2, "fp16"))


def test_max_safe_scale_values_and_errors():
    assert max_safe_scale(0.5) == 2**16
    assert max_safe_scale(65520 / 2**3) == 2**2  # exactly on the edge rounds to inf
    assert max_safe_scale(-0.5) == 2**16
    assert max_safe_scale(100000.0) == Fraction(1, 2)
    with pytest.raises(ValueError, match="grad must be a positive finite number, got 0"):
        max_safe_scale(0.0)


def test_underflow_fraction():
    values = [1e-8, 1e-3, 0.0, -1e-9]
    assert underflow_fraction(values, "fp16") == pytest.approx(2 / 3)
    assert underflow_fraction(values, "fp16", 2**16) == 0.0
    assert underflow_fraction(values, "bf16") == 0.0
    with pytest.raises(ValueError, match="at least one nonzero"):
        underflow_fraction([0.0], "fp16")
    with pytest.raises(ValueError, match="scale must be a positive finite number, got -1"):
        underflow_fraction(values, "fp16", -1)


def test_apply_updates_swamping():
    fp16 = apply_updates(1.0, 1e-4, 100, "fp16")
    assert fp16.shape == (101,) and (fp16 == 1.0).all()
    assert (apply_updates(1.0, 2.0**-8, 10, "bf16") == 1.0).all()  # a tie, to even: lost
    # just over half an ulp rounds up to a whole ulp: each update counts double
    assert apply_updates(1.0, 2.0**-11 + 2.0**-20, 4, "fp16")[-1] == 1 + 4 * 2.0**-10
    fp32 = apply_updates(1.0, 1e-4, 1000, "fp32")[-1]
    assert fp32 == pytest.approx(1.1, rel=1e-4) and fp32 != 1.1
    with pytest.raises(ValueError, match="steps must be a positive whole number, got 0"):
        apply_updates(1.0, 1e-4, 0, "fp16")


# -- dynamic loss scaling -------------------------------------------------------------

def test_gradscaler_defaults():
    """torch.amp.GradScaler(init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000)."""
    assert GRADSCALER_DEFAULTS == LossScaler(65536.0, 2.0, 0.5, 2000)


def test_scaler_grows_after_interval_of_clean_steps():
    run = simulate_loss_scaler(np.full(4500, 1e-3))
    assert run.skipped_steps == 0
    assert (run.scales[:2000] == 2**16).all()
    assert (run.scales[2000:4000] == 2**17).all()
    assert (run.scales[4000:] == 2**18).all()


def test_scaler_backs_off_and_restarts_the_count():
    grads = np.full(2500, 1e-3)
    grads[0] = 1.0  # 65536 >= 65520: overflow
    grads[100] = np.inf  # a NaN/inf gradient always counts as overflow
    run = simulate_loss_scaler(grads)
    assert np.flatnonzero(run.skipped).tolist() == [0, 100]
    assert run.scales[0] == 2**16 and (run.scales[1:101] == 2**15).all()
    assert (run.scales[101:2101] == 2**14).all() and run.scales[2101] == 2**15


def test_scaler_overflow_matches_fp16_casts():
    rng = np.random.default_rng(3)
    grads = rng.lognormal(np.log(0.05), 1.0, 5000)
    run = simulate_loss_scaler(grads, scaler=LossScaler(2.0**16, 2.0, 0.5, 50))
    assert 0 < run.skipped_steps < run.steps
    overflowed = ~np.isfinite(round_to(grads * run.scales, "fp16"))
    assert (overflowed == run.skipped).all()


def test_scaler_growth_stops_at_fp32_max():
    run = simulate_loss_scaler(np.zeros(5), "bf16", LossScaler(2.0**127, 2.0, 0.5, 1))
    assert (run.scales == 2.0**127).all()


def test_scaler_rejects_bad_input():
    with pytest.raises(ValueError, match="grad_max must be magnitudes"):
        simulate_loss_scaler([1e-3, -1e-3])
    with pytest.raises(ValueError, match="non-empty 1-D"):
        simulate_loss_scaler(np.ones((2, 2)))
    with pytest.raises(ValueError, match="growth_interval must be a positive whole number"):
        simulate_loss_scaler([1e-3], scaler=LossScaler(2.0**16, 2.0, 0.5, 0))


# -- activations at another precision ---------------------------------------------------

def test_autocast_keeps_the_softmax_and_the_residual_stream_in_fp32():
    """PyTorch's Autocast Op Reference puts softmax and layer_norm on the CUDA float32 list, and
    autocast leaves an fp32 model's residual stream in fp32. Korthikanti et al. 2022 §4.1's
    tensors then change: softmax output 2 -> 4 bytes per as²b, the two LayerNorm inputs 2 -> 4
    bytes per sbh each; every matmul input is the 16-bit copy autocast made. 34 + 4 = 38 and
    5 + 2 = 7."""
    assert activation_coefficients(2, autocast=True) == (38, 7)
    assert activation_coefficients(2) == (34, 5)  # Megatron-style: everything in 16 bits
    assert activation_coefficients(4, autocast=True) == activation_coefficients(4) == (66, 9)
    assert [t.name for t in KORTHIKANTI_LAYER if t.autocast_fp32] == [
        "softmax output", "input to the first LayerNorm", "input to the second LayerNorm"]


def test_fp8_overflow_saturating_and_not():
    """OCP 8-bit floating point specification: E4M3 has no infinity, so a non-saturating
    conversion of an overflow gives NaN (ml_dtypes, PyTorch's plain cast); the saturating
    conversion gives the largest finite value, ±448 (E4M3) and ±57,344 (E5M2)."""
    assert math.isnan(round_to(500.0, "fp8-e4m3"))
    assert round_to(500.0, "fp8-e4m3", saturate=True) == 448.0
    assert round_to(-1e30, "fp8-e4m3", saturate=True) == -448.0
    assert round_to(float("inf"), "fp8-e4m3", saturate=True) == 448.0
    assert round_to(1e6, "fp8-e5m2") == float("inf")
    assert round_to(1e6, "fp8-e5m2", saturate=True) == 57344.0
    assert math.isnan(round_to(float("nan"), "fp8-e4m3", saturate=True))
    # below the largest value saturation changes nothing
    assert round_to(300.0, "fp8-e4m3", saturate=True) == round_to(300.0, "fp8-e4m3") == 288.0
    assert round_to(70_000.0, "fp16", saturate=True) == 65504.0


def test_activation_coefficients():
    """16-bit values reproduce Korthikanti eq. 1; fp32 doubles all but the 1-byte masks."""
    assert activation_coefficients(2) == (SBH_COEFFICIENT, AS2B_COEFFICIENT) == (34, 5)
    assert activation_coefficients(4) == (66, 9)
    assert activation_coefficients(1) == (18, 3)


def test_masks_are_the_one_byte_tensors():
    masks = [t for t in KORTHIKANTI_LAYER if is_mask(t)]
    assert len(masks) == 3
    assert all(t.sbh + t.as2b == 1 for t in masks)
    assert all((t.sbh + t.as2b) % 2 == 0 for t in KORTHIKANTI_LAYER if not is_mask(t))


@pytest.mark.parametrize(
    ("x", "name", "expected"),
    [
        (1 + 2**-8 + 2**-40, "bf16", 1 + 2**-7),  # just above a tie: up, not to even
        (1 + 2**-8, "bf16", 1.0),  # the tie itself: to even
        (1 + 2**-8 - 2**-40, "bf16", 1.0),
        (1 + 2**-11 + 2**-40, "fp16", 1 + 2**-10),
        (1 + 2**-4 + 2**-40, "fp8-e4m3", 1 + 2**-3),
        (-(1 + 2**-3 + 2**-45), "fp8-e5m2", -(1 + 2**-2)),
        (2.0**-134 + 2**-160, "bf16", 2.0**-133),  # above half the smallest subnormal
        (2.0**-134, "bf16", 0.0),
    ],
)
def test_round_to_rounds_once(x, name, expected):
    """A plain ml_dtypes cast from float64 goes through float32 and can round twice."""
    assert round_to(x, name) == expected
    assert round_to(np.array([x, x]), name).tolist() == [expected, expected]


def test_round_to_agrees_with_plain_casts_on_float32_inputs():
    """Where the float32 step is exact, round_to is the library's cast, bit for bit."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(20_000) * 10.0 ** rng.integers(-12, 6, 20_000)).astype(np.float32)
    for name in ("bf16", "fp8-e4m3", "fp8-e5m2"):
        with np.errstate(over="ignore", invalid="ignore"):
            plain = x.astype(DTYPES[name]).astype(np.float64)
        ours = round_to(x.astype(np.float64), name)
        assert np.array_equal(ours, plain, equal_nan=True), name


def _all_finite_values(name):
    """Every non-negative finite value of a 16- or 8-bit format, with its bit pattern."""
    dtype = DTYPES[name]
    width = np.dtype(dtype).itemsize
    patterns = np.arange(2 ** (8 * width - 1), dtype=np.uint16 if width == 2 else np.uint8)
    with np.errstate(invalid="ignore"):  # the NaN patterns
        values = patterns.view(dtype).astype(np.float64)
    keep = np.isfinite(values)
    return values[keep], patterns[keep]


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8-e4m3", "fp8-e5m2"])
def test_round_to_is_nearest_ties_to_even_by_enumeration(name):
    """Against every value of the format: random inputs and every midpoint (a tie)."""
    grid, patterns = _all_finite_values(name)
    rng = np.random.default_rng(11)
    top = float(FORMATS[name].max)
    mids = (grid[:-1] + grid[1:]) / 2
    x = np.concatenate([rng.uniform(0, top, 4000), np.exp(rng.uniform(-100, np.log(top), 4000))
                        .clip(0, top), mids])
    i = np.searchsorted(grid, x).clip(1, len(grid) - 1)
    low, high = grid[i - 1], grid[i]
    tie = x - low == high - x
    pick_high = np.where(tie, patterns[i] % 2 == 0, high - x < x - low)
    expected = np.where(pick_high, high, low)
    assert np.array_equal(round_to(x, name), expected)
    assert np.array_equal(round_to(-x, name), -expected)
