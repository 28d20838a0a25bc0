"""Every rule of docs/circular_pad2d_backward.md: the aclnn status code, a message that
names the argument and the rule, and a pre-filled output left untouched."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import padloss
from padloss import Status
from shared import assert_refused

F32 = np.float32


def good():
    """A valid call: (grad_output, self, padding, out)."""
    return (np.ones((2, 3, 7, 9), F32), np.empty((2, 3, 5, 5), F32), [2, 2, 1, 1],
            np.full((2, 3, 5, 5), 42.0, F32))


def _case(**change):
    go, x, pads, out = good()
    args = dict(grad_output=go, self=x, padding=pads, out=out)
    args.update(change)
    return args


def _readonly():
    a = np.full((2, 3, 5, 5), 42.0, F32)
    a.flags.writeable = False
    return a


BAD = {
    # name: (arguments, status, argument named, words of the rule)
    "grad_output None": (_case(grad_output=None), Status.PARAM_NULLPTR, "grad_output", "required"),
    "self None": (_case(self=None), Status.PARAM_NULLPTR, "self", "required"),
    "padding None": (_case(padding=None), Status.PARAM_NULLPTR, "padding", "required"),
    "self int dtype": (_case(self=np.empty((2, 3, 5, 5), np.int32)), Status.PARAM_INVALID, "self",
                       "dtype int32 is not supported"),
    "grad dtype differs": (_case(grad_output=np.ones((2, 3, 7, 9), np.float16)), Status.PARAM_INVALID,
                           "grad_output", "must equal self's dtype"),
    "out dtype differs": (_case(out=np.zeros((2, 3, 5, 5), np.float64)), Status.PARAM_INVALID, "out",
                          "must equal self's dtype"),
    "rank 2": (_case(self=np.empty((5, 5), F32), grad_output=np.ones((7, 9), F32),
                     out=np.zeros((5, 5), F32)), Status.PARAM_INVALID, "self", "rank 2"),
    "rank 5": (_case(self=np.empty((1, 2, 3, 5, 5), F32), grad_output=np.ones((1, 2, 3, 7, 9), F32),
                     out=np.zeros((1, 2, 3, 5, 5), F32)), Status.PARAM_INVALID, "self", "rank 5"),
    "ranks differ": (_case(grad_output=np.ones((6, 7, 9), F32)), Status.PARAM_INVALID, "grad_output",
                     "must equal self's rank"),
    "out shape": (_case(out=np.zeros((2, 3, 5, 4), F32)), Status.PARAM_INVALID, "out",
                  "must equal self's shape"),
    "padding length": (_case(padding=[1, 1, 1]), Status.PARAM_INVALID, "padding", "4 integers"),
    "padding float": (_case(padding=[1.0, 1, 1, 1]), Status.PARAM_INVALID, "padding", "integers"),
    "padding bool": (_case(padding=[True, 1, 1, 1]), Status.PARAM_INVALID, "padding", "integers"),
    "padding not a sequence": (_case(padding=3), Status.PARAM_INVALID, "padding", "sequence"),
    "grad W wrong": (_case(grad_output=np.ones((2, 3, 7, 8), F32)), Status.PARAM_INVALID, "grad_output",
                     "W + left + right"),
    "grad H wrong": (_case(grad_output=np.ones((2, 3, 8, 9), F32)), Status.PARAM_INVALID, "grad_output",
                     "H + top + bottom"),
    "grad leading dim": (_case(grad_output=np.ones((2, 4, 7, 9), F32)), Status.PARAM_INVALID,
                         "grad_output", "leading dims"),
    "left >= W": (_case(padding=[5, 0, 1, 1], grad_output=np.ones((2, 3, 7, 10), F32)),
                  Status.PARAM_INVALID, "padding", "width: pad 5 must be smaller than the input size 5"),
    "bottom >= H": (_case(padding=[2, 2, 0, 5], grad_output=np.ones((2, 3, 10, 9), F32)),
                    Status.PARAM_INVALID, "padding", "height: pad 5 must be smaller"),
    "crop to nothing": (_case(padding=[-3, -2, 1, 1], grad_output=np.ones((2, 3, 7, 0), F32)),
                        Status.PARAM_INVALID, "padding", "padded size 5 + -3 + -2 must be >= 1"),
    "wraps twice after crop": (_case(padding=[4, -2, 1, 1], grad_output=np.ones((2, 3, 7, 7), F32)),
                               Status.PARAM_INVALID, "padding", "wraps more than once"),
    "zero-sized H": (_case(self=np.empty((2, 3, 0, 5), F32), grad_output=np.ones((2, 3, 2, 9), F32),
                           out=np.zeros((2, 3, 0, 5), F32)), Status.PARAM_INVALID, "self", "zero-sized"),
    "out read-only": (_case(out=_readonly()), Status.PARAM_INVALID, "out", "read-only"),
    "grad big-endian": (_case(grad_output=np.ones((2, 3, 7, 9), ">f4")), Status.PARAM_INVALID,
                        "grad_output", "byte order"),
    "grad not an array": (_case(grad_output=[[1.0]]), Status.PARAM_INVALID, "grad_output",
                          "must be a NumPy array"),
    "unknown backend": (dict(_case(), backend="nope"), Status.PARAM_INVALID, "backend", "unknown backend"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_rule(name):
    args, status, argument, words = BAD[name]
    assert_refused(padloss.circular_pad2d_backward, args, status, argument, words)


def test_out_overlapping_grad_output_is_refused():
    buf = np.ones((2, 3, 7, 9), F32)
    before = buf.copy()
    with pytest.raises(padloss.InvalidArgumentError, match="shares memory with 'grad_output'"):
        padloss.circular_pad2d_backward(buf, np.empty((2, 3, 5, 5), F32), [2, 2, 1, 1],
                                        out=buf[:, :, 1:6, 2:7])
    np.testing.assert_array_equal(buf, before)


def test_two_phase_names_grad_input_and_requires_it():
    go, x, pads, _ = good()
    with pytest.raises(padloss.NullArgumentError) as info:
        padloss.circular_pad2d_backward_get_workspace_size(go, x, pads, None)
    assert info.value.status == Status.PARAM_NULLPTR and info.value.argument == "grad_input"
    with pytest.raises(padloss.InvalidArgumentError, match="'grad_input': shape"):
        padloss.circular_pad2d_backward_get_workspace_size(go, x, pads, np.zeros((2, 3, 5, 6), F32))


def test_float64_and_bfloat16_accepted():
    for dt in (np.float64, ml_dtypes.bfloat16):
        out = padloss.circular_pad2d_backward(np.ones((1, 1, 4), dt), np.empty((1, 1, 2), dt), [1, 1, 0, 0])
        assert out.dtype == dt and out.tolist() == [[[2.0, 2.0]]]


def test_rules_hold_for_a_signature_validated_before():
    """A repeated call skips re-validating its metadata (padloss.fastpath), but never a
    rule that depends on the values or the buffers themselves."""
    go, x, pads, out = good()
    padloss.circular_pad2d_backward(go, x, tuple(pads), out=out)          # remembered
    with pytest.raises(padloss.InvalidArgumentError, match="integers"):
        padloss.circular_pad2d_backward(go, x, (2.0, 2, 1, 1), out=out)   # 2.0 == 2 as a dict key
    with pytest.raises(padloss.InvalidArgumentError, match="integers"):
        padloss.circular_pad2d_backward(go, x, (True, 2, 1, 1), out=np.zeros((2, 3, 5, 5), F32))
    before = out.copy()
    out.flags.writeable = False
    with pytest.raises(padloss.InvalidArgumentError, match="read-only"):
        padloss.circular_pad2d_backward(go, x, tuple(pads), out=out)
    buf = np.ones((2, 3, 7, 9), F32)
    alias = np.lib.stride_tricks.as_strided(buf, out.shape, out.strides)   # same metadata as out
    with pytest.raises(padloss.InvalidArgumentError, match="shares memory"):
        padloss.circular_pad2d_backward(buf, x, tuple(pads), out=alias)
    np.testing.assert_array_equal(out, before)


def test_padding_not_given_as_plain_ints_is_never_taken_from_memory():
    """Padding as a NumPy array (not a memo key) must be read on every call: two
    paddings with the same array metadata give their own results."""
    from padloss import reference

    go = np.random.default_rng(5).standard_normal((1, 2, 7, 7)).astype(F32)
    x, out = np.empty((1, 2, 5, 5), F32), np.empty((1, 2, 5, 5), F32)
    for pads in (np.array([1, 1, 1, 1]), np.array([2, 0, 2, 0]), np.array([0, 2, 1, 1])):
        padloss.circular_pad2d_backward(go, x, pads, out=out)
        np.testing.assert_array_equal(out, reference.circular_pad2d_backward(go, x.shape, list(pads)))
