"""Floating-point formats for training, what rounding into them does, and dynamic loss scaling.

Facts about each format (exponent and mantissa bits, largest finite value, smallest normal and
subnormal, machine epsilon, decimal digits) are read from ``numpy.finfo`` (fp32, fp16) and
``ml_dtypes.finfo`` (bf16, fp8), never typed. tf32 has no NumPy or ml_dtypes dtype: its facts come
from :func:`derive_format`, the IEEE 754-2019 rules (§3.3 and §3.4, binary interchange formats)
applied to its bit layout, and the tests check that the same function reproduces ``finfo``
exactly for every format that has one.

Sources: IEEE 754-2019 (fp32, fp16); NVIDIA, *TensorFloat-32 in the A100 GPU* (2020): tf32 has
fp32's 8 exponent bits and fp16's 10 mantissa bits; Kalamkar et al. 2019, *A Study of BFLOAT16
for Deep Learning Training* (bf16); Micikevicius et al. 2022, *FP8 Formats for Deep Learning*,
Table 1 (E4M3, E5M2); Micikevicius et al. 2018, *Mixed Precision Training*, §3.1 (fp32 master
weights) and §3.2 (loss scaling); PyTorch's ``torch.amp.GradScaler`` (dynamic loss scaling).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

try:
    import ml_dtypes
    import numpy as np
except ImportError as exc:  # the one module with dependencies: the `precision` extra
    raise ImportError(
        "trainmath.precision reads format facts from numpy and ml_dtypes, which are not installed; "
        "install them with: pip install 'trainmath[precision]'"
    ) from exc

from .memory.activations import KORTHIKANTI_LAYER, SavedTensor
from .units import choice, positive_int

#: How a format spends its all-ones exponent field.
#: "ieee": on infinities and NaNs, as IEEE 754-2019 §3.4 does;
#: "fn" ("finite"): on normal numbers, except the one all-ones mantissa that means NaN; there are
#: no infinities (E4M3 in Micikevicius et al. 2022, Table 1; ml_dtypes' ``float8_e4m3fn``).
ENCODINGS = ("ieee", "fn")


@dataclass(frozen=True)
class FloatFormat:
    """The facts of one binary floating-point format; values are exact Fractions."""

    name: str
    exponent_bits: int
    mantissa_bits: int  # stored (trailing) mantissa bits; the leading 1 is implicit
    max: Fraction  # largest finite value
    smallest_normal: Fraction
    smallest_subnormal: Fraction
    eps: Fraction  # gap between 1 and the next larger value: 2^-mantissa_bits
    #: decimal digits as finfo reports them (``finfo.precision``)
    decimal_digits: int
    has_inf: bool
    #: where the facts come from: a finfo call, or the bit layout
    source: str
    sign_bits: int = 1

    @property
    def bits(self) -> int:
        """Significant bits: sign + exponent + mantissa (IEEE 754-2019 §3.4).

        tf32 is 19 bits held in 32.
        """
        return self.sign_bits + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        """Exponent bias, 2^(exponent bits - 1) - 1 (IEEE 754-2019 §3.4)."""
        return 2 ** (self.exponent_bits - 1) - 1

    def facts(self) -> tuple:
        """Everything but the name and the source, for comparing two descriptions."""
        return (self.sign_bits, self.exponent_bits, self.mantissa_bits, self.max,
                self.smallest_normal, self.smallest_subnormal, self.eps, self.decimal_digits,
                self.has_inf)


def decimal_digits(mantissa_bits: int) -> int:
    """NumPy's ``finfo.precision``: int(-log10(eps)) with eps = 2^-m, in exact integers.

    It is the largest d with 10^d <= 2^m. ml_dtypes follows it for bf16 (2) but states 1 for
    every fp8 format, where the rule gives 0 (see ``ml_dtypes/_finfo.py``).
    """
    m = positive_int("mantissa_bits", mantissa_bits)
    return len(str(2**m)) - 1


def derive_format(name: str, exponent_bits: int, mantissa_bits: int,
                  encoding: str = "ieee") -> FloatFormat:
    """A format's facts from its bit layout, by IEEE 754-2019 §3.3-3.4.

    With e exponent bits and m mantissa bits: bias = 2^(e-1) - 1; the smallest normal is
    2^(1 - bias); the smallest subnormal 2^(1 - bias - m); eps 2^-m. The largest exponent is
    2^e - 2 - bias for "ieee" (the all-ones exponent is inf/NaN), so max = (2 - 2^-m) 2^emax;
    for "fn" the all-ones exponent holds numbers too (emax = 2^e - 1 - bias), but its all-ones
    mantissa is NaN, so max = (2 - 2^(1-m)) 2^emax (Micikevicius et al. 2022, Table 1: 448).
    """
    e = positive_int("exponent_bits", exponent_bits)
    m = positive_int("mantissa_bits", mantissa_bits)
    choice("encoding", encoding, ENCODINGS)
    if e < 2:
        raise ValueError(f"exponent_bits must be at least 2, got {e}")
    two = Fraction(2)
    bias = 2 ** (e - 1) - 1
    emin = 1 - bias
    if encoding == "ieee":
        emax = 2**e - 2 - bias
        largest = (2 - two**-m) * two**emax
    else:
        emax = 2**e - 1 - bias
        largest = (2 - two ** (1 - m)) * two**emax
    return FloatFormat(
        name=name, exponent_bits=e, mantissa_bits=m, max=largest,
        smallest_normal=two**emin, smallest_subnormal=two ** (emin - m), eps=two**-m,
        decimal_digits=decimal_digits(m), has_inf=encoding == "ieee",
        source=f"derived from its bit layout ({e} exponent, {m} mantissa bits, {encoding})",
    )


def _exact(x) -> Fraction:
    return Fraction(float(x))  # every finfo value is a binary fraction: exact in a float


def _finfo(dtype):
    return np.finfo(dtype) if dtype in (np.float32, np.float16) else ml_dtypes.finfo(dtype)


def from_finfo(name: str, dtype) -> FloatFormat:
    """A format's facts as ``numpy.finfo`` (fp32, fp16) or ``ml_dtypes.finfo`` report them."""
    f = _finfo(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        has_inf = bool(np.isinf(np.array(np.inf).astype(dtype)))
    module = "numpy" if dtype in (np.float32, np.float16) else "ml_dtypes"
    return FloatFormat(
        name=name, exponent_bits=int(f.nexp), mantissa_bits=int(f.nmant), max=_exact(f.max),
        smallest_normal=_exact(f.smallest_normal),
        smallest_subnormal=_exact(f.smallest_subnormal), eps=_exact(f.eps),
        decimal_digits=int(f.precision), has_inf=has_inf,
        source=f"{module}.finfo({module}.{np.dtype(dtype).name})",
        sign_bits=int(f.bits) - int(f.nexp) - int(f.nmant),
    )


#: The dtype that rounds into each format. tf32 has none: it exists inside tensor cores only.
DTYPES = {
    "fp32": np.float32,
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8-e4m3": ml_dtypes.float8_e4m3fn,  # the OCP / Micikevicius et al. 2022 E4M3
    "fp8-e5m2": ml_dtypes.float8_e5m2,
}


def _tf32() -> FloatFormat:
    """tf32: fp32's exponent field and fp16's mantissa field (NVIDIA 2020), IEEE rules."""
    fp32, fp16 = np.finfo(np.float32), np.finfo(np.float16)
    return derive_format("tf32", int(fp32.nexp), int(fp16.nmant), "ieee")


#: Every format this site discusses, widest first.
#:
#: :meta hide-value:
FORMATS: dict[str, FloatFormat] = {
    "fp32": from_finfo("fp32", DTYPES["fp32"]),
    "tf32": _tf32(),
    "fp16": from_finfo("fp16", DTYPES["fp16"]),
    "bf16": from_finfo("bf16", DTYPES["bf16"]),
    "fp8-e4m3": from_finfo("fp8-e4m3", DTYPES["fp8-e4m3"]),
    "fp8-e5m2": from_finfo("fp8-e5m2", DTYPES["fp8-e5m2"]),
}


def float_format(name: str) -> FloatFormat:
    """The facts of the format called ``name``; a ValueError lists the known ones."""
    return FORMATS[choice("format", name, FORMATS)]


# ---------------------------------------------------------------------------------------
# Rounding into a format
# ---------------------------------------------------------------------------------------

def _float32_round_to_odd(values: np.ndarray) -> np.ndarray:
    """float64 -> float32, rounding an inexact result to the neighbour with an odd last bit.

    ml_dtypes casts a float64 to bf16 or fp8 through float32, so a float64 just above a tie
    of the target format lands on the tie in float32 and then rounds to even: two roundings,
    a wrong result. Rounding to odd in the float32 step prevents that whenever float32 has
    at least two more bits than the target (Boldo & Melquiond 2008, *Emulation of FMA and
    correctly rounded sums: proved algorithms using rounding to odd*, Theorem 1).
    """
    r = values.astype(np.float32)
    inexact = (r.astype(np.float64) != values) & ~np.isnan(values)
    even = (r.view(np.uint32) & 1) == 0
    fix = inexact & even
    if np.any(fix):
        toward = np.where(values[fix] > r[fix], np.float32(np.inf), np.float32(-np.inf))
        r[fix] = np.nextafter(r[fix], toward)
    return r


def round_to(x, name: str, *, saturate: bool = False):
    """``x`` rounded to the nearest value of format ``name`` (ties to even), as float64.

    Uses the format's NumPy / ml_dtypes cast (for ml_dtypes through a float32 rounded to odd,
    so that the result is rounded once: Boldo & Melquiond 2008, Theorem 1). Ties to even is
    IEEE 754-2019's roundTiesToEven (§4.3.1). A scalar gives a float, an array an array.

    Overflow: without saturation (the default, what NumPy, ml_dtypes and PyTorch's plain
    ``.to(torch.float8_e4m3fn)`` do), values past the overflow threshold become inf, or NaN in
    fp8-e4m3, which has no inf. ``saturate=True`` is the OCP 8-bit floating point
    specification's saturating conversion: magnitudes past the largest finite value, infinities
    included, become ± that value (448 in fp8-e4m3), as FP8 training casts do (torchao's
    ``to_fp8_saturated`` clamps before it casts; CUDA's fp8 conversions take
    ``__NV_SATFINITE``). NaN stays NaN.
    """
    choice("format", name, FORMATS)
    if name not in DTYPES:
        raise ValueError(
            f"format {name!r} has no NumPy or ml_dtypes dtype to round with; "
            f"accepted: {', '.join(DTYPES)}"
        )
    values = np.asarray(x, dtype=np.float64)
    if saturate:
        largest = float(FORMATS[name].max)
        values = np.clip(values, -largest, largest)  # NaN passes through clip unchanged
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if DTYPES[name] not in (np.float32, np.float16):  # NumPy casts from float64 directly
            values = _float32_round_to_odd(values)
        rounded = values.astype(DTYPES[name]).astype(np.float64)
    return float(rounded) if rounded.ndim == 0 else rounded


def overflow_threshold(name: str) -> Fraction:
    """The magnitude at which rounding leaves the finite range: max + half an ulp of max.

    In an IEEE format a value at or above it rounds to inf (the tie goes to the even neighbour,
    2^(emax+1), which is inf): IEEE 754-2019 §4.3.1, a result of magnitude at least
    b^emax × (b - ½b^(1-p)) rounds to infinity. fp16: 65504 + 16 = 65520.
    """
    fmt = float_format(name)
    emax = math.frexp(float(fmt.max))[1] - 1
    return fmt.max + Fraction(2) ** (emax - fmt.mantissa_bits - 1)


def _positive_real(label: str, value) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or value <= 0:
        raise ValueError(f"{label} must be a positive finite number, got {value!r}")
    return Fraction(value)


def max_safe_scale(grad: float, name: str = "fp16") -> int | Fraction:
    """The largest power-of-two loss scale S with ``|grad| × S`` below the overflow threshold.

    Loss scaling (Micikevicius et al. 2018, §3.2): a scale is safe while the largest scaled
    gradient does not overflow. Powers of two, as :data:`GRADSCALER_DEFAULTS` grows and backs
    off by factors of two, so scaling itself is exact.
    """
    if isinstance(grad, numbers.Real) and not isinstance(grad, bool):
        grad = abs(grad)  # the sign does not matter
    g = _positive_real("grad", grad)
    ratio = overflow_threshold(name) / g
    k = ratio.numerator.bit_length() - ratio.denominator.bit_length()
    while Fraction(2) ** k > ratio:
        k -= 1
    while Fraction(2) ** (k + 1) <= ratio:
        k += 1
    if Fraction(2) ** k == ratio:  # exactly on the threshold: rounds to inf
        k -= 1
    scale = Fraction(2) ** k
    return int(scale) if scale.denominator == 1 else scale


def underflow_fraction(values, name: str = "fp16", scale: float = 1.0) -> float:
    """Fraction of the nonzero ``values`` that become exactly zero when scaled and rounded.

    The underflow that loss scaling prevents (Micikevicius et al. 2018, §3.2).
    """
    s = _positive_real("scale", scale)
    v = np.asarray(values, dtype=np.float64)
    nonzero = v[v != 0]
    if nonzero.size == 0:
        raise ValueError("values must contain at least one nonzero value")
    return float(np.mean(round_to(nonzero * float(s), name) == 0))


def apply_updates(w0: float, update: float, steps: int, name: str) -> np.ndarray:
    """A weight kept in format ``name`` after each of ``steps`` additions of ``update``.

    Both are rounded into the format first (the update arrives in it), and every sum is
    rounded back: returns the ``steps + 1`` weights, the start included. An update under half
    an ulp of the weight is lost every time: "swamping" (Micikevicius et al. 2018, §3.1).
    """
    n = positive_int("steps", steps)
    w = round_to(w0, name)
    u = round_to(update, name)
    history = np.empty(n + 1)
    history[0] = w
    for i in range(1, n + 1):
        w = round_to(w + u, name)
        history[i] = w
    return history


# ---------------------------------------------------------------------------------------
# Dynamic loss scaling
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LossScaler:
    """A dynamic loss scaler's settings, as ``torch.amp.GradScaler`` takes them."""

    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int


#: ``torch.amp.GradScaler``'s defaults (PyTorch documentation, "Gradient Scaling"): start at
#: 2^16, double after 2000 steps in a row without inf/NaN, halve on an overflow.
GRADSCALER_DEFAULTS = LossScaler(
    init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000
)


@dataclass(frozen=True)
class ScalerRun:
    """A simulated run: ``scales[t]`` is the scale used at step t; ``skipped[t]`` is True when
    the scaled gradients overflowed, so the optimizer step was skipped."""

    scales: np.ndarray
    skipped: np.ndarray

    @property
    def steps(self) -> int:
        """Steps simulated."""
        return len(self.scales)

    @property
    def skipped_steps(self) -> int:
        """Steps skipped because the scaled gradients overflowed."""
        return int(self.skipped.sum())


def simulate_loss_scaler(grad_max, name: str = "fp16",
                         scaler: LossScaler = GRADSCALER_DEFAULTS) -> ScalerRun:
    """Run GradScaler's update rule over a stream of per-step largest gradient magnitudes.

    A step overflows when ``grad_max[t] × scale`` reaches the format's overflow threshold (or
    is inf/NaN): the step is skipped, the scale is multiplied by ``backoff_factor`` and the
    count of clean steps restarts. After ``growth_interval`` clean steps in a row the scale is
    multiplied by ``growth_factor`` (if the result is finite in fp32) and the count restarts.
    This is ``torch._amp_update_scale_`` (Micikevicius et al. 2018, §3.2, describe the scheme).
    """
    g = np.asarray(grad_max, dtype=np.float64)
    if g.ndim != 1 or g.size == 0:
        raise ValueError(f"grad_max must be a non-empty 1-D sequence, got shape {g.shape}")
    if np.any(g < 0):
        raise ValueError(f"grad_max must be magnitudes (>= 0), got {g[g < 0][0]!r}")
    _positive_real("init_scale", scaler.init_scale)
    _positive_real("growth_factor", scaler.growth_factor)
    _positive_real("backoff_factor", scaler.backoff_factor)
    interval = positive_int("growth_interval", scaler.growth_interval)
    threshold = float(overflow_threshold(name))
    fp32_max = float(FORMATS["fp32"].max)
    scale, clean = float(scaler.init_scale), 0
    scales = np.empty(g.size)
    skipped = np.zeros(g.size, dtype=bool)
    for t, grad in enumerate(g.tolist()):
        scales[t] = scale
        if not grad * scale < threshold:  # also true for inf and NaN
            skipped[t] = True
            scale *= scaler.backoff_factor
            clean = 0
            continue
        clean += 1
        if clean == interval:
            grown = scale * scaler.growth_factor
            if grown <= fp32_max:
                scale = grown
            clean = 0
    return ScalerRun(scales, skipped)


# ---------------------------------------------------------------------------------------
# Activations at another precision
# ---------------------------------------------------------------------------------------

def is_mask(tensor: SavedTensor) -> bool:
    """Dropout masks are stored as one byte per element whatever the activation precision.

    As Korthikanti et al. 2022, §4.1 count them.
    """
    return "mask" in tensor.name


def activation_coefficients(value_bytes: int,
                            tensors: tuple[SavedTensor, ...] = KORTHIKANTI_LAYER,
                            *, autocast: bool = False) -> tuple[int, int]:
    """(bytes per s·b·h, bytes per a·s²·b) of one layer with activations of ``value_bytes``.

    Korthikanti et al. 2022, §4.1, eq. 1 count 2-byte (16-bit) activations and 1-byte dropout
    masks: 34 and 5, as a Megatron-style half-precision model keeps them (16-bit weights, a
    16-bit residual stream, the softmax written out in 16 bits). Each activation term scales
    with the value size; masks stay 1 byte, so fp32 activations (4 bytes) give 66 and 9.

    ``autocast=True`` counts PyTorch's automatic mixed precision instead (``torch.autocast``
    over an fp32 model): the tensors marked ``autocast_fp32`` stay in fp32, 4 bytes: the
    softmax output (softmax is on autocast's CUDA float32 list, PyTorch's "Autocast Op
    Reference") and the two LayerNorm inputs (the residual stream of fp32 parameters). Every
    matrix multiply saves the 16-bit copy of its input that autocast made, so the rest keep
    ``value_bytes``: 38 and 7 for 16-bit autocast. Autocast also saves the 16-bit copy of each
    weight it casts, which is not an activation and is not counted here.
    """
    size = positive_int("value_bytes", value_bytes)
    fp32 = float_format("fp32").bits // 8
    sbh = as2b = Fraction(0)
    for t in tensors:
        if is_mask(t):
            factor = Fraction(1)
        elif autocast and t.autocast_fp32:
            factor = Fraction(fp32, 2)
        else:
            factor = Fraction(size, 2)
        sbh += t.sbh * factor
        as2b += t.as2b * factor
    if sbh.denominator != 1 or as2b.denominator != 1:
        raise ValueError(f"value_bytes {size} splits a byte; accepted: whole bytes of 2 or more")
    return int(sbh), int(as2b)
