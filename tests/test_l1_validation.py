"""Every rule of docs/l1_loss_backward.md: the aclnn status code, a message that
names the argument and the rule, and a pre-filled output left untouched."""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest

import padloss
from padloss import Status
from padloss.rules import promoted_dtype
from shared import assert_refused

F32 = np.float32


def _case(**change):
    """A valid call (grad_output 0-d, self (2, 3), target (3,), out (2, 3)) with ``change``."""
    args = dict(grad_output=np.array(1.0, F32), self=np.ones((2, 3), F32), target=np.zeros(3, F32),
                reduction="mean", out=np.full((2, 3), 42.0, F32))
    args.update(change)
    return args


def _readonly():
    a = np.full((2, 3), 42.0, F32)
    a.flags.writeable = False
    return a


NINE_DIMS = (1,) * 9
BAD = {
    # name: (arguments, status, argument named, words of the rule)
    "grad_output None": (_case(grad_output=None), Status.PARAM_NULLPTR, "grad_output", "required"),
    "self None": (_case(self=None), Status.PARAM_NULLPTR, "self", "required"),
    "target None": (_case(target=None), Status.PARAM_NULLPTR, "target", "required"),
    "reduction None": (_case(reduction=None), Status.PARAM_NULLPTR, "reduction", "required"),
    "reduction 3": (_case(reduction=3), Status.PARAM_INVALID, "reduction", "must be 0 (none), 1 (mean)"),
    "reduction -1": (_case(reduction=-1), Status.PARAM_INVALID, "reduction", "got -1"),
    "reduction name": (_case(reduction="average"), Status.PARAM_INVALID, "reduction", "'average'"),
    "reduction bool": (_case(reduction=True), Status.PARAM_INVALID, "reduction", "got True"),
    "reduction float": (_case(reduction=1.0), Status.PARAM_INVALID, "reduction", "got 1.0"),
    "all integer inputs": (_case(grad_output=np.array(1, np.int32), self=np.ones((2, 3), np.int64),
                                 target=np.zeros(3, np.bool_)),
                           Status.PARAM_INVALID, "self", "promoted dtype is undefined"),
    "complex self": (_case(self=np.ones((2, 3), np.complex64)), Status.PARAM_INVALID, "self",
                     "dtype complex64 is not supported"),
    "string target": (_case(target=np.array(["a", "b", "c"])), Status.PARAM_INVALID, "target",
                      "is not supported"),
    "integer out": (_case(out=np.zeros((2, 3), np.int32)), Status.PARAM_INVALID, "out",
                    "dtype int32 is not a float"),
    "bool out": (_case(out=np.zeros((2, 3), np.bool_)), Status.PARAM_INVALID, "out", "dtype bool"),
    "self 9 dims": (_case(self=np.ones(NINE_DIMS, F32), out=np.zeros(NINE_DIMS[:-1] + (3,), F32)),
                    Status.PARAM_INVALID, "self", "rank 9 is more than 8"),
    "grad 9 dims": (_case(grad_output=np.ones(NINE_DIMS, F32)), Status.PARAM_INVALID, "grad_output",
                    "rank 9"),
    "target not broadcastable": (_case(target=np.zeros(4, F32)), Status.PARAM_INVALID, "target",
                                 "shape (4,) does not broadcast"),
    "self not broadcastable with grad": (_case(grad_output=np.ones((3, 3), F32)), Status.PARAM_INVALID,
                                         "self", "does not broadcast with grad_output's shape (3, 3)"),
    "out shape": (_case(out=np.zeros((3,), F32)), Status.PARAM_INVALID, "out",
                  "must equal the broadcast shape (2, 3)"),
    "out shape smaller than B": (_case(grad_output=np.ones((4, 1, 1), F32)), Status.PARAM_INVALID,
                                 "out", "broadcast shape (4, 2, 3)"),
    "out read-only": (_case(out=_readonly()), Status.PARAM_INVALID, "out", "read-only"),
    "target big-endian": (_case(target=np.zeros(3, ">f4")), Status.PARAM_INVALID, "target",
                          "byte order"),
    "self not an array": (_case(self=[[1.0, 2.0, 3.0]]), Status.PARAM_INVALID, "self",
                          "must be a NumPy array"),
    "grad_output a bool": (_case(grad_output=True), Status.PARAM_INVALID, "grad_output",
                           "must be a NumPy array"),
    "grad_output an int past float": (_case(grad_output=10**400), Status.PARAM_INVALID, "grad_output",
                                      "past a float's range"),
    "unknown backend": (dict(_case(), backend="nope"), Status.PARAM_INVALID, "backend", "unknown backend"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_rule(name):
    args, status, argument, words = BAD[name]
    assert_refused(padloss.l1_loss_backward, args, status, argument, words)


def test_out_overlapping_an_input_is_refused():
    buf = np.ones((2, 3), F32)
    before = buf.copy()
    with pytest.raises(padloss.InvalidArgumentError, match="shares memory with 'self'"):
        padloss.l1_loss_backward(F32(1.0), buf, np.zeros(3, F32), "none", out=buf)
    np.testing.assert_array_equal(buf, before)


def test_two_phase_names_grad_input_and_requires_it():
    args = _case()
    with pytest.raises(padloss.NullArgumentError) as info:
        padloss.l1_loss_backward_get_workspace_size(args["grad_output"], args["self"], args["target"],
                                                    1, None)
    assert info.value.status == Status.PARAM_NULLPTR and info.value.argument == "grad_input"
    with pytest.raises(padloss.InvalidArgumentError, match="'grad_input': shape"):
        padloss.l1_loss_backward_get_workspace_size(args["grad_output"], args["self"], args["target"],
                                                    1, np.zeros((2, 4), F32))


def test_rebinding_a_buffer_of_other_metadata_is_refused():
    args = _case()
    _, ex = padloss.l1_loss_backward_get_workspace_size(args["grad_output"], args["self"], args["target"],
                                                        1, args["out"])
    with pytest.raises(padloss.InvalidArgumentError, match="'target': has dtype float16"):
        ex.run(target=np.zeros(3, np.float16))
    np.testing.assert_array_equal(args["out"], 42.0)


@pytest.mark.parametrize("reduction,code", [(0, 0), (1, 1), (2, 2), ("none", 0), ("mean", 1),
                                            ("sum", 2), (np.int64(2), 2)])
def test_reduction_spellings(reduction, code):
    _, ex = padloss.l1_loss_backward_get_workspace_size(np.array(1.0, F32), np.ones(3, F32),
                                                        np.zeros(3, F32), reduction, np.empty(3, F32))
    assert ex.problem.params == (code,)


def test_accepted_mixes():
    """Mixed floats, integer/bool inputs with a float, downcast and float64 outputs are valid."""
    bf16 = ml_dtypes.bfloat16
    for go, x, t, out_dtype in [(np.float16, bf16, np.float16, F32), (F32, F32, np.int8, np.float16),
                                (np.bool_, bf16, np.uint8, bf16), (np.float64, F32, F32, bf16),
                                (F32, np.float16, np.int64, np.float64)]:
        out = padloss.l1_loss_backward(np.ones((), go), np.ones(3, x), np.zeros(3, t), "sum",
                                       out=np.empty(3, out_dtype))
        assert out.tolist() == [1.0, 1.0, 1.0]


def test_promotion_table():
    assert promoted_dtype(["float16", "bfloat16"]) == "float32"
    assert promoted_dtype(["bfloat16", "bfloat16", "int64"]) == "bfloat16"
    assert promoted_dtype(["float16", "float32", "bfloat16"]) == "float32"
    assert promoted_dtype(["float16", "float64", "bool"]) == "float64"
    assert promoted_dtype(["int16", "uint8", "float16"]) == "float16"
    assert promoted_dtype(["int16", "uint8", "bool"]) is None


def test_reduction_not_given_as_str_or_int_is_never_taken_from_memory():
    """A NumPy integer reduction is read on every call, not matched from memory."""
    from padloss import reference

    g, x = np.ones((), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    t, out = np.full((2, 3), 2.0, np.float32), np.empty((2, 3), np.float32)
    for reduction in (np.int64(1), np.int64(0), np.int64(2)):
        padloss.l1_loss_backward(g, x, t, reduction, out=out)
        np.testing.assert_array_equal(out, reference.l1_loss_backward(g, x, t, int(reduction)))


@pytest.mark.parametrize("scalar", [np.float32(2.0), np.float16(-3.0), np.float64(0.5)])
def test_a_numpy_scalar_grad_output_takes_the_fast_path(scalar, monkeypatch):
    """As its 0-d array does: the second call with the same metadata is not validated
    again, and gives the same bits as the 0-d array."""
    from padloss import l1_loss, reference

    x, t = np.arange(6, dtype=np.float32).reshape(2, 3), np.full(3, 2.0, np.float32)
    out = np.empty((2, 3), np.float32)
    padloss.l1_loss_backward(scalar, x, t, "mean", out=out)          # validated, remembered
    validated = []
    real = l1_loss._op.validate_inputs
    monkeypatch.setattr(l1_loss._op, "validate_inputs", lambda *a: validated.append(a) or real(*a))
    got = padloss.l1_loss_backward(scalar, x, t, "mean", out=out).copy()
    allocated = padloss.l1_loss_backward(scalar, x, t, "mean")        # the allocating memo, once
    padloss.l1_loss_backward(scalar, x, t, "mean")
    assert len(validated) == 1
    into_float32 = reference.l1_loss_backward(np.asarray(scalar), x, t, "mean",
                                              out_dtype=np.dtype(np.float32))
    np.testing.assert_array_equal(got.view(np.uint32), into_float32.view(np.uint32))
    want = reference.l1_loss_backward(np.asarray(scalar), x, t, "mean")   # dtype P
    assert allocated.dtype == want.dtype
    np.testing.assert_array_equal(allocated, want)


SCALAR_CASES = [   # (self's dtype, target's dtype, the 0-d's dtype: P, or float32 for no float)
    ("float16", "float16", "float16"), ("bfloat16", "int8", "bfloat16"), ("float32", "float32", "float32"),
    ("float64", "float16", "float64"), ("float16", "bfloat16", "float32"), ("int32", "bool", "float32")]


def _dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _assert_bits(got, want):
    """Bit-equal, a NaN matching any NaN (0 * inf: its sign is not the contract's)."""
    unsigned = np.dtype(f"u{want.dtype.itemsize}")
    differ = got.view(unsigned) != want.view(unsigned)
    assert not (differ & ~(np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64)))).any(), \
        (got, want)


@pytest.mark.parametrize("self_dtype, target_dtype, scalar_dtype", SCALAR_CASES)
@pytest.mark.parametrize("value", [0.1, -3, 1e5, 2**70])
def test_a_python_float_or_int_grad_output_is_a_0d_of_p(self_dtype, target_dtype, scalar_dtype, value,
                                                         monkeypatch):
    """It is the 0-d array of P (float32 when neither self nor target is a float), its value
    rounded once to it (0.1 in float16 is not 0.1 in float32; 1e5 is inf in float16), and it
    takes the fast path as that array would: remembered after one validation."""
    from padloss import l1_loss, reference

    x = np.array([[-2.5, 0.0, 3.0], [1.0, -0.0, 7.0]]).astype(_dtype(self_dtype))
    t = np.array([1.0, 0.0, -1.0]).astype(_dtype(target_dtype))
    with np.errstate(over="ignore"):
        as_array = np.asarray(value, _dtype(scalar_dtype))
    want = {r: reference.l1_loss_backward(as_array, x, t, r) for r in ("none", "sum")}
    padloss.l1_loss_backward(value, x, t, "sum")                       # validated, remembered
    validated = []
    real = l1_loss._op.validate_inputs
    monkeypatch.setattr(l1_loss._op, "validate_inputs", lambda *a: validated.append(a) or real(*a))
    got = padloss.l1_loss_backward(value, x, t, "sum")
    assert not validated
    assert got.dtype == want["sum"].dtype
    _assert_bits(got, want["sum"])
    _, executor = padloss.l1_loss_backward_get_workspace_size(value, x, t, "none", out := np.empty_like(got))
    executor.run()
    _assert_bits(out, want["none"])


def test_a_python_float_grad_output_beside_torch_tensors_is_a_torch_0d_of_p():
    """Beside torch tensors the same rule makes a torch 0-d of P (on self's device)."""
    torch = pytest.importorskip("torch")
    from padloss import reference

    x = torch.tensor([[-2.5, 0.0, 3.0], [1.0, 5.0, 7.0]], dtype=torch.bfloat16)
    t = torch.tensor([1.0, 0.0, -1.0], dtype=torch.bfloat16)
    got = padloss.l1_loss_backward(0.3, x, t, "mean")
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    bf16 = ml_dtypes.bfloat16
    want = reference.l1_loss_backward(np.asarray(0.3, bf16), x.float().numpy().astype(bf16),
                                      t.float().numpy().astype(bf16), "mean")
    np.testing.assert_array_equal(got.view(torch.int16).numpy(), want.view(np.int16))


def test_a_known_signature_still_refuses_an_output_overlapping_an_input():
    """The fast path (a signature seen before) checks overlap on every call: the same array
    as self, a view overlapping it, or a view of self's memory; distinct owners pass."""
    buf = np.arange(12, dtype=F32).reshape(2, 6)
    x, t, out = buf[:, :3], np.zeros(3, F32), np.empty((2, 6), F32)[:, :3]
    padloss.l1_loss_backward(F32(1.0), x, t, "none", out=out)                 # remembered
    owner_x, owner_out = np.ones((2, 3), F32), np.empty((2, 3), F32)
    padloss.l1_loss_backward(F32(1.0), owner_x, t, "none", out=owner_out)      # remembered
    # an output owning its memory against inputs in it: a view (its base is the output), the
    # output's buffer read back through np.frombuffer and a ctypes array over its address
    at_address = (ctypes.c_float * 6).from_address(owner_out.ctypes.data)
    ctypes_view = np.ctypeslib.as_array(at_address).reshape(2, 3)
    for same_meta_out, self_ in ((buf[:, 1:4], x), (owner_x, owner_x), (owner_out, owner_out[:, :]),
                                 (owner_out, np.frombuffer(owner_out, F32).reshape(2, 3)),
                                 (owner_out, ctypes_view)):
        before = self_.copy()
        with pytest.raises(padloss.InvalidArgumentError, match="shares memory with 'self'"):
            padloss.l1_loss_backward(F32(1.0), self_, t, "none", out=same_meta_out)
        np.testing.assert_array_equal(self_, before)
