"""Error bounds for comparing a floating-point result with the exact one.

A tolerance against another library's gradients must be a bound on what that library
computes, not a guessed constant: a guess is either loose enough to hide a bug or tight
enough for hypothesis to find data past it. The bound here is the textbook one (Higham,
*Accuracy and Stability of Numerical Algorithms*, 2nd ed., §2.2 and §4.2): in IEEE
arithmetic every operation obeys ``fl(a op b) = (a op b)(1 + d) + e`` with ``|d| <= u``
(u = 2**-p, half an ulp relative, p the significand's bits) and ``|e| <= eta`` (at most
half the smallest subnormal: only products, quotients and narrowing casts that land among the
subnormals lose it; sums there are exact). A result that took ``r`` such roundings of
terms whose magnitudes add up to ``S`` is within ``gamma_r * S + r * eta`` of the exact
value, ``gamma_r = r u / (1 - r u)``, whatever the order of the sums. So a comparison
needs, per element, the number of roundings and the sum of the absolute terms; each test
works both out from what the compared code does.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

# p, the bits of each dtype's significand (the hidden bit included)
_SIGNIFICAND_BITS = {np.dtype(np.float16): 11, np.dtype(ml_dtypes.bfloat16): 8,
                     np.dtype(np.float32): 24, np.dtype(np.float64): 53}


def _np_dtype(dtype) -> np.dtype:
    """A NumPy dtype for a NumPy dtype or scalar type, a torch dtype or a name."""
    if type(dtype).__module__ == "torch":
        dtype = str(dtype).removeprefix("torch.")
    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


def unit_roundoff(dtype) -> float:
    """u: the largest relative error of one rounding to nearest in ``dtype``."""
    return 2.0 ** -_SIGNIFICAND_BITS[_np_dtype(dtype)]


def underflow_error(dtype) -> float:
    """eta, the absolute error one rounding may add among the subnormals: taken as the
    smallest subnormal itself (twice the true eta, which float64 cannot hold for itself)."""
    return float(ml_dtypes.finfo(_np_dtype(dtype)).smallest_subnormal)


def gamma(roundings, dtype):
    """gamma_r = r u / (1 - r u), elementwise in ``roundings``."""
    ru = np.asarray(roundings, np.float64) * unit_roundoff(dtype)
    return ru / (1 - ru)


def rounding_bound(dtype, roundings, abs_sum):
    """How far ``roundings`` roundings in ``dtype`` of terms whose magnitudes add up to
    ``abs_sum`` can take a result from the exact one (elementwise)."""
    r = np.asarray(roundings, np.float64)
    return gamma(r, dtype) * np.asarray(abs_sum, np.float64) + r * underflow_error(dtype)


def sum_bound(dtype, terms, abs_sum):
    """A sum of ``terms`` values accumulated in ``dtype``: ``terms - 1`` roundings."""
    return rounding_bound(dtype, np.maximum(np.asarray(terms) - 1, 0), abs_sum)


def narrowing_bound(dtype, value_bound):
    """One rounding of a value of magnitude at most ``value_bound`` into ``dtype``."""
    return unit_roundoff(dtype) * np.asarray(value_bound, np.float64) + underflow_error(dtype)


def assert_within(actual, exact, bound, what: str) -> None:
    """``|actual - exact| <= bound`` elementwise (NaNs where exact is NaN, infinities
    equal); the message names the worst element, its error and its bound. ``actual``
    may be a torch tensor."""
    if hasattr(actual, "detach"):
        actual = actual.detach().double().numpy()
    actual = np.asarray(actual, np.float64)
    exact = np.asarray(exact, np.float64)
    bound = np.broadcast_to(np.asarray(bound, np.float64), exact.shape)
    assert actual.shape == exact.shape, (what, actual.shape, exact.shape)
    nan = np.isnan(exact)
    np.testing.assert_array_equal(np.isnan(actual), nan, err_msg=f"{what}: NaNs differ")
    finite = np.isfinite(exact)
    np.testing.assert_array_equal(actual[~finite & ~nan], exact[~finite & ~nan],
                                  err_msg=f"{what}: infinities differ")
    with np.errstate(invalid="ignore"):
        error = np.where(finite, np.abs(actual - exact), 0.0)
    excess = error - np.where(finite, bound, 0.0)
    if excess.size and excess.max() > 0:
        at = np.unravel_index(int(np.argmax(excess)), excess.shape)
        raise AssertionError(f"{what}: |{actual[at]!r} - exact {exact[at]!r}| = {error[at]:.3g} "
                             f"exceeds its rounding bound {bound[at]:.3g} at index {at}")


def wider(a, b) -> np.dtype:
    """The dtype of the two with the finer rounding (the one its sums are carried in)."""
    a, b = _np_dtype(a), _np_dtype(b)
    return a if unit_roundoff(a) <= unit_roundoff(b) else b


def coarser(*dtypes) -> np.dtype:
    """The dtype with the coarsest rounding: a bound in it covers roundings in any of them."""
    return max((_np_dtype(d) for d in dtypes), key=unit_roundoff)


def padloss_pad_bound(dtype, terms, abs_sum, exact):
    """padloss's pad backward (spec): 16-bit values widen exactly and are summed in
    float32 (``terms - 1`` roundings), then rounded once into ``dtype``; float32 and
    float64 are summed in themselves."""
    accumulated = wider(dtype, np.float32)
    carried = sum_bound(accumulated, terms, abs_sum)
    if accumulated == _np_dtype(dtype):
        return carried
    return carried + narrowing_bound(dtype, np.abs(np.asarray(exact, np.float64)) + carried)


def sum_to(a: np.ndarray, shape) -> np.ndarray:
    """``a`` summed over the dims that broadcasting ``shape`` to ``a.shape`` added or
    stretched (torch's ``sum_to_size``), in ``a``'s dtype."""
    lead = a.ndim - len(shape)
    stretched = tuple(lead + i for i, n in enumerate(shape) if n == 1 and a.shape[lead + i] != 1)
    return a.sum(axis=tuple(range(lead)) + stretched, keepdims=True).reshape(shape)


def pad_terms(grad_output, self_shape, padding):
    """For each element of the pad's gradient, from torch's float64 autograd of
    ``F.pad(mode="circular")``: the sum of its terms, the sum of their magnitudes and
    their count, and a bound on the float64 sum's own error."""
    import torch
    import torch.nn.functional as F

    def backward(g):
        x = torch.zeros(self_shape, dtype=torch.float64, requires_grad=True)
        F.pad(x, list(padding), mode="circular").backward(g)
        return x.grad.numpy()

    g64 = torch.as_tensor(np.asarray(grad_output, np.float64)) if not hasattr(grad_output, "detach") \
        else grad_output.detach().double()
    exact, abs_sum, terms = backward(g64), backward(g64.abs()), backward(torch.ones_like(g64))
    return exact, abs_sum, terms, sum_bound(np.float64, terms, abs_sum)


def l1_terms(grad_output, self, target, reduction):
    """The exact L1 gradient over the broadcast shape B, in float64:
    ``sign(self - target) * grad_output / N`` (N = B's size for mean, else 1), and a
    bound on its float64 division's error."""
    g, x, t = (np.asarray(a, np.float64) for a in (grad_output, self, target))
    shape = np.broadcast_shapes(g.shape, x.shape, t.shape)
    divisor = float(np.prod(shape)) if reduction == "mean" else 1.0
    full = np.broadcast_to(np.sign(x - t) * g / divisor, shape)
    return full, rounding_bound(np.float64, 1, np.abs(full))


def summed(full: np.ndarray, full_error: np.ndarray, shape):
    """``full`` summed to ``shape`` (as autograd sums a broadcast input's gradient): the
    exact sums, their magnitudes' sums, their term counts and the float64 error bound."""
    terms = sum_to(np.ones_like(full), shape)
    abs_sum = sum_to(np.abs(full), shape)
    return sum_to(full, shape), abs_sum, terms, sum_to(full_error, shape) + sum_bound(np.float64, terms,
                                                                                       abs_sum)
