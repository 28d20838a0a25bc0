"""Targets (docs/targets.md): the refusal table of that page against what each call does,
the pad's width limits, how a call picks its target, and the memo keeping them apart."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padloss
from padloss import Status, npu_targets
from padloss.npu_targets import L1, PAD

PAGE = Path(__file__).resolve().parent.parent / "docs" / "targets.md"
DTYPES = ("float16", "bfloat16", "float32", "float64")
OUTCOMES = {"ok": None, "model": Status.RUNTIME_ERROR, "161002": Status.PARAM_INVALID,
            "561103": Status.INNER_NULLPTR}


def _dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def refusal_table() -> dict[tuple[str, str, str], str]:
    """(target, op, dtype) -> outcome, from the table docs/targets.md marks for this test."""
    text = PAGE.read_text(encoding="utf-8")
    rows = text.split("<!-- refusal table: tests/test_targets.py reads it -->", 1)[1].strip().splitlines()
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header == ["target", "op", *DTYPES]
    table = {}
    for row in rows[2:]:
        if not row.startswith("|"):
            break
        target, op, *outcomes = [c.strip() for c in row.strip("|").split("|")]
        table.update({(target, op, dtype): outcome for dtype, outcome in zip(DTYPES, outcomes)})
    return table


def pad_call(dtype, width=7, **kwargs):
    d = _dtype(dtype)
    go = (np.arange(2 * 6 * width, dtype=np.float64) % 97).reshape(1, 2, 6, width).astype(d)
    out = np.full((1, 2, 4, width - 2), 42, d)
    return lambda: padloss.circular_pad2d_backward(go, out, (1, 1, 1, 1), out=out, **kwargs), out


def l1_call(dtype, target_dtype=None, **kwargs):
    d = _dtype(dtype)
    x = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]]).astype(d)
    t = np.zeros(3, _dtype(target_dtype or dtype))
    out = np.full((2, 3), 42, d)
    return lambda: padloss.l1_loss_backward(np.ones((), d), x, t, "mean", out=out, **kwargs), out


CALLS = {PAD: pad_call, L1: l1_call}


def outcome_of(call, out) -> Status | None:
    before = out.copy()
    try:
        call()
    except padloss.PadlossError as err:
        np.testing.assert_array_equal(out.view(np.uint8), before.view(np.uint8))   # nothing written
        return err.status
    return None


def test_the_refusal_table_covers_every_target_op_and_dtype():
    table = refusal_table()
    assert {k[0] for k in table} == set(npu_targets.TARGETS)
    assert len(table) == len(npu_targets.TARGETS) * 2 * len(DTYPES)
    assert set(table.values()) <= set(OUTCOMES)


@pytest.mark.parametrize("key", sorted(refusal_table()), ids="-".join)
def test_each_call_does_what_the_refusal_table_says(key):
    target, op, dtype = key
    call, out = CALLS[op](dtype, npu_target=target)
    assert outcome_of(call, out) == OUTCOMES[refusal_table()[key]]


def test_a_refusal_names_the_target_the_argument_and_the_status():
    with pytest.raises(padloss.PadlossError, match="target 'atlas-inference' .*does not run this op") as err:
        pad_call("float32", npu_target="atlas-inference")[0]()
    assert err.value.status == Status.INNER_NULLPTR and err.value.argument == "npu_target"
    refused = "dtype bfloat16 is not one target 'atlas-training'"
    with pytest.raises(padloss.InvalidArgumentError, match=refused) as err:
        l1_call("bfloat16", npu_target="atlas-training")[0]()
    assert err.value.argument == "self"
    with pytest.raises(padloss.InvalidArgumentError, match="dtype float64 is not one") as err:
        x, t = np.ones(3, np.float32), np.zeros(3, np.float32)
        padloss.l1_loss_backward(np.float32(1), x, t, "none", out=np.empty(3), npu_target="atlas-a2")
    assert err.value.argument == "out"


@pytest.mark.parametrize("dtype, limit", [("float16", 16362), ("bfloat16", 16362), ("float32", 24544)])
def test_the_pads_width_limit_is_the_products_not_the_specs(dtype, limit):
    """grad_output's last dim must lie in (0, limit) on the products (aclnn's page)."""
    for target in ("atlas-a2", "atlas-a3"):
        assert outcome_of(*pad_call(dtype, limit - 1, npu_target=target)) is None
        assert outcome_of(*pad_call(dtype, limit, npu_target=target)) == Status.INNER_NULLPTR
    assert outcome_of(*pad_call(dtype, limit, npu_target="spec")) is None
    with pytest.raises(padloss.PadlossError, match=f"last dim {limit} is past"):
        pad_call(dtype, limit, npu_target="atlas-a2")[0]()


@pytest.mark.parametrize("p_dtype, out_dtype", [("float16", "float32"), ("float16", "bfloat16"),
                                                 ("bfloat16", "float16"), ("bfloat16", "float32"),
                                                 ("float32", "float16"), ("float32", "bfloat16")])
def test_product_targets_round_l1_to_p_before_the_output_as_canns_op_api(p_dtype, out_dtype):
    """CANN's op_api runs the kernel into P and casts that to the output (the op-api model):
    with a 16-bit P and another output dtype the bits differ from the spec's one rounding
    (the mean's 1/3 keeps float16's precision in a float32 output); with a float32 P they
    are the spec's. Integer inputs are rounded once to P either way (2049 -> 2048)."""
    from padloss import reference

    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 7)) * 10
    x.flat[::5], x.flat[1::6], x.flat[2::9] = np.nan, -0.0, np.inf   # NaN: sign 0; equal zeros: 0
    x = x.astype(_dtype(p_dtype))
    t = x[1].copy()                       # row 1 equal to the target: sign 0 (a -0.0 times grad)
    t[::3] = rng.standard_normal(3)
    g = np.asarray(rng.standard_normal(), _dtype(p_dtype))
    for target in ("atlas-a2", "ascend-950", "atlas-training"):
        if not {p_dtype, out_dtype} <= npu_targets.TARGETS[target].ops[L1].dtypes:
            continue
        for backend in ("numba", "torch"):
            got = padloss.l1_loss_backward(g, x, t, "mean", out=np.empty((3, 7), _dtype(out_dtype)),
                                           npu_target=target, backend=backend)
            want = reference.l1_loss_backward(g, x, t, "mean", _dtype(out_dtype), numerics="op-api")
            _assert_bits(np.asarray(got), want)
    spec = reference.l1_loss_backward(g, x, t, "mean", _dtype(out_dtype))
    differs = (spec.view(f"u{spec.itemsize}") != want.view(f"u{want.itemsize}")).any()
    if p_dtype == "float32":
        assert not differs
    elif (p_dtype, out_dtype) != ("float16", "bfloat16"):   # a double rounding shows at ties only
        assert differs
    ints, twos = np.array([2049, -3, 0], np.int32), np.full((2, 3), 2048, np.float16)
    got = padloss.l1_loss_backward(np.float16(1), twos, ints, "none", npu_target="atlas-a2")
    np.testing.assert_array_equal(got, reference.l1_loss_backward(np.float16(1), twos, ints, "none"))


def _assert_bits(got, want):
    unsigned = np.dtype(f"u{want.dtype.itemsize}")
    nan = np.isnan(want.astype(np.float64))
    assert got.dtype == want.dtype and (np.isnan(got.astype(np.float64)) == nan).all()
    assert (got.view(unsigned)[~nan] == want.view(unsigned)[~nan]).all()


def test_product_targets_give_the_specs_bits_where_they_run():
    rng = np.random.default_rng(3)
    g = rng.standard_normal((1, 2, 9, 11)).astype(np.float16)
    x, t = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    self_ = np.empty((1, 2, 5, 7), np.float16)
    for target in ("atlas-a2", "atlas-a3"):
        a = padloss.circular_pad2d_backward(g, self_, (2, 2, 2, 2), npu_target=target)
        b = padloss.circular_pad2d_backward(g, self_, (2, 2, 2, 2))
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
    for target in ("atlas-a2", "atlas-training", "ascend-950"):
        a = padloss.l1_loss_backward(np.float32(0.3), x, t, "mean", npu_target=target)
        np.testing.assert_array_equal(a, padloss.l1_loss_backward(np.float32(0.3), x, t, "mean"))


def test_the_setting_a_block_and_the_argument_pick_the_target():
    call, out = pad_call("float32")
    assert padloss.config.current.target == npu_targets.DEFAULT
    assert outcome_of(call, out) is None
    with padloss.config.set(target="atlas-training"):
        assert outcome_of(call, out) == Status.INNER_NULLPTR          # remembered under spec: not reused
        assert outcome_of(*pad_call("float32", npu_target="atlas-a2")) is None   # the argument wins
    assert outcome_of(call, out) is None
    with pytest.raises(TypeError, match="not a valid value"):
        padloss.config.set(target="atlas-a9")
    with pytest.raises(padloss.InvalidArgumentError, match="'npu_target': 'atlas-a9' is not a target"):
        pad_call("float32", npu_target="atlas-a9")[0]()


def test_the_environment_variable_sets_the_target():
    env = dict(os.environ, PADLOSS_TARGET="atlas-inference")
    script = ("import numpy as np, padloss\n"
              "go, out = np.ones((1, 1, 4, 4), np.float32), np.empty((1, 1, 2, 2), np.float32)\n"
              "try:\n    padloss.circular_pad2d_backward(go, out, (1, 1, 1, 1))\n"
              "except padloss.PadlossError as err:\n    print(int(err.status), err.argument)\n")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["561103", "npu_target"]


def test_targets_lists_the_default_first_with_its_products():
    listed = padloss.targets()
    assert listed[0].name == npu_targets.DEFAULT == "spec"
    assert [t.name for t in listed] == ["spec", "atlas-a2", "atlas-a3", "atlas-training", "atlas-inference",
                                        "atlas-200i-500-a2", "ascend-950"]
    assert all(t.supports(L1) == (t.name != "atlas-200i-500-a2") for t in listed)
    page = PAGE.read_text(encoding="utf-8")
    assert all(re.search(rf"^\| `{t.name}`", page, re.M) for t in listed)


def test_padloss_torch_refuses_in_the_forward_under_a_target():
    torch = pytest.importorskip("torch")
    import padloss.torch as pt

    x = torch.ones(1, 2, 4, 4, requires_grad=True)
    with padloss.config.set(target="atlas-inference"):
        with pytest.raises(padloss.PadlossError) as err:
            pt.circular_pad2d(x, 1)
        assert err.value.status == Status.INNER_NULLPTR
        with pytest.raises(padloss.InvalidArgumentError, match="bfloat16"):
            pt.l1_loss(x.detach().bfloat16().requires_grad_(), torch.zeros(1, 2, 4, 4, dtype=torch.bfloat16))
        pt.l1_loss(x, torch.zeros(1, 2, 4, 4)).backward()     # float32: the product takes it
        half = x.detach().half().requires_grad_()                # P float32, its gradient float16
        pt.l1_loss(half, torch.zeros(1, 2, 4, 4)).backward()
    assert x.grad is not None


@pytest.mark.parametrize("soc, target", [
    ("Ascend910B1", "atlas-a2"), ("Ascend910B4", "atlas-a2"), ("Ascend910_9391", "atlas-a3"),
    ("Ascend910C2", "atlas-a3"), ("Ascend910A", "atlas-training"), ("Ascend910ProB", "atlas-training"),
    ("Ascend310P3", "atlas-inference"), ("Ascend310B1", "atlas-200i-500-a2"), ("Ascend950PR", "ascend-950"),
    ("Ascend910_9589", "ascend-950"), ("Ascend999", None)])
def test_socs_map_to_their_products(soc, target):
    found = npu_targets.for_soc(soc)
    assert (found.name if found else None) == target


def test_an_ascend_device_is_its_own_target(monkeypatch):
    """On an NPU the device's SoC decides (read through torch_npu's get_device_name): spec
    there means the device's target, another name must agree with it; CPU calls and SoCs
    no target lists keep the named one."""
    torch = pytest.importorskip("torch")
    from padloss_ascend import ascend_backend

    asked = []
    fake_npu = types.SimpleNamespace(get_device_name=lambda index=None: asked.append(index) or "Ascend310P3")
    monkeypatch.setattr(torch, "npu", fake_npu, raising=False)
    monkeypatch.setattr(ascend_backend, "ascend_availability", lambda: (True, ""))
    assert npu_targets.for_call(PAD, None, "npu:1").name == "atlas-inference"
    assert asked == [1]
    assert npu_targets.for_call(PAD, "atlas-inference", "npu:0").name == "atlas-inference"
    with pytest.raises(padloss.InvalidArgumentError, match="target 'atlas-a2' is not the device's: npu:0 is "
                                                           "an Ascend310P3, target 'atlas-inference'") as err:
        npu_targets.for_call(PAD, "atlas-a2", "npu:0")
    assert err.value.argument == "npu_target" and err.value.target == "atlas-a2"
    assert npu_targets.for_call(PAD, "atlas-a2", "cpu").name == "atlas-a2"
    monkeypatch.setattr(fake_npu, "get_device_name", lambda index=None: "Ascend999")
    assert npu_targets.for_call(PAD, "atlas-a2", "npu:0").name == "atlas-a2"


# --- Ascend 950's circular pad: the arch35-simt model ---------------------------------------------

def test_arch35_sums_from_plus_zero_and_rounds_ties_to_even():
    """Hand-worked: a lone -0.0 term gives +0.0 (the spec keeps -0.0); a float16 sum halfway
    between two float16s, 1 + 2**-11, rounds to even, 1.0 (the spec: away, 1 + 2**-10)."""
    from padloss import reference

    g = np.array([[[[-0.0, -0.0, -0.0]]]], np.float16)     # (1, 1, 1, 3), pads (1, 0, 0, 0): W = 2
    got = padloss.circular_pad2d_backward(g, np.empty((1, 1, 1, 2), np.float16), (1, 0, 0, 0),
                                          npu_target="ascend-950")
    assert not np.signbit(got).any()
    assert np.signbit(reference.circular_pad2d_backward(g, (1, 1, 1, 2), (1, 0, 0, 0))).all()
    tie = np.array([[[[2.0**-11, 0.5, 1.0]]]], np.float16)  # element 1: 1.0 + its left-band copy 2**-11
    got = padloss.circular_pad2d_backward(tie, np.empty((1, 1, 1, 2), np.float16), (1, 0, 0, 0),
                                          npu_target="ascend-950")
    assert got[0, 0, 0, 1] == 1.0
    assert reference.circular_pad2d_backward(tie, (1, 1, 1, 2), (1, 0, 0, 0))[0, 0, 0, 1] == 1 + 2.0**-10


@st.composite
def arch35_case(draw):
    dtype = draw(st.sampled_from(["float16", "bfloat16", "float32"]))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    pads = (draw(st.integers(0, w - 1)), draw(st.integers(0, w - 1)), draw(st.integers(0, h - 1)),
            draw(st.integers(0, h - 1)))
    rank3 = draw(st.booleans())
    return dtype, ((c,) if rank3 else (n, c)) + (h, w), pads, draw(st.integers(0, 2**31))


@settings(max_examples=60, deadline=None)
@given(arch35_case())
def test_arch35_is_the_references_bit_for_bit_on_numba_and_torch(case):
    """Random shapes, pads and values with signed zeros, infinities, NaNs and ties, under
    target ascend-950: the Numba and torch backends give padloss.reference's arch35-simt
    bits (NaNs as NaNs), which are not the spec's for most inputs."""
    from padloss import reference

    dtype, shape, pads, seed = case
    rng = np.random.default_rng(seed)
    left, right, top, bottom = pads
    g_shape = shape[:-2] + (shape[-2] + top + bottom, shape[-1] + left + right)
    g = rng.choice([0.0, -0.0, 1.0, 2.0**-11, -3.5, 1e4, np.inf, -np.inf, np.nan, 0.1], size=g_shape)
    g = np.where(rng.random(g_shape) < 0.5, rng.standard_normal(g_shape) * 100, g).astype(_dtype(dtype))
    want = reference.circular_pad2d_backward(g, shape, pads, numerics="arch35-simt")
    backends = ["numba"] + (["torch"] if "torch" in {b.name for b in padloss.available_backends()
                                                     if b.available} else [])
    for backend in backends:
        got = np.asarray(padloss.circular_pad2d_backward(g, np.empty(shape, _dtype(dtype)), pads,
                                                         npu_target="ascend-950", backend=backend))
        unsigned = np.dtype(f"u{want.dtype.itemsize}")
        nan = np.isnan(want.astype(np.float64))
        assert (np.isnan(got.astype(np.float64)) == nan).all(), backend
        assert (got.view(unsigned)[~nan] == want.view(unsigned)[~nan]).all(), backend


def test_arch35_refuses_what_it_does_not_model_and_compiles_only_when_used():
    """Negative pads and its kernel's wide-row path are refused (361001); a process that ran
    the spec's pad never imported (so never compiled) the arch35 kernel."""
    g, x = np.ones((1, 1, 4, 6), np.float32), np.empty((1, 1, 4, 6), np.float32)
    with pytest.raises(padloss.BackendError, match="negative pads") as err:
        padloss.circular_pad2d_backward(g, x, (-1, 1, 0, 0), npu_target="ascend-950")
    assert err.value.target == "ascend-950"
    width = npu_targets.ARCH35_SIMT_WIDTH + 1         # and 8 x (width + 2) > 48 Ki elements
    wide, x = np.ones((1, 8, 1, width + 2), np.float32), np.empty((1, 8, 1, width), np.float32)
    with pytest.raises(padloss.BackendError, match="wide rows"):
        padloss.circular_pad2d_backward(wide, x, (1, 1, 0, 0), npu_target="ascend-950")
    script = ("import sys, numpy as np, padloss\n"
              "padloss.circular_pad2d_backward(np.ones((1, 1, 4, 6), np.float32), np.empty((1, 1, 4, 4), "
              "np.float32), (1, 1, 0, 0))\n"
              "print('padloss_numba.pad_arch35' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False"]


# --- CANN's own system-test cases, under the targets of the kernels they test ----------------------

ST = json.loads((Path(__file__).resolve().parent / "data" / "cann_st_cases.json").read_text(encoding="utf-8"))
RUN_MAX_ELEMENTS = 1 << 14   # the cases that small are also computed (the rest: phase 1 only)


def _bits(a):
    return a.reshape(-1).view(f"u{a.itemsize}")


def _st_ids():
    return [(i, target) for i, suite in enumerate(ST["suites"]) for target in suite["targets"]]


@pytest.mark.parametrize("suite, target", _st_ids(), ids=lambda v: str(v))
def test_cann_st_cases_pass_under_their_targets(suite, target):
    """Each case of CANN's ST suites for a kernel (tests/data/cann_st_cases.json names where
    they come from) is accepted in phase 1 under the target of that kernel; the small ones
    give the target's model's bits (padloss.reference) when run."""
    from padloss import reference

    spec = ST["suites"][suite]
    rng = np.random.default_rng(suite)
    numerics = npu_targets.TARGETS[target].ops[spec["op"]].numerics
    for case in spec["cases"]:
        dtype = _dtype(case[0])
        if spec["op"] == PAD:
            _, g_shape, self_shape, pads = case
            g, out = np.empty(g_shape, dtype), np.empty(self_shape, dtype)
            call = padloss.circular_pad2d_backward_get_workspace_size
            size, executor = call(g, out, pads, out, npu_target=target)
            if out.size and out.size <= RUN_MAX_ELEMENTS:
                g[...] = rng.uniform(0, 100, g_shape)
                executor.run(workspace=np.empty(size, np.uint8))
                want = reference.circular_pad2d_backward(g, self_shape, pads, numerics=numerics)
                np.testing.assert_array_equal(_bits(out), _bits(want), err_msg=str(case))
        else:
            _, g_shape, x_shape, t_shape, reduction = case
            g, x, t = (np.empty(s, dtype) for s in (g_shape, x_shape, t_shape))
            out = np.empty(np.broadcast_shapes(g_shape, x_shape, t_shape), dtype)
            call = padloss.l1_loss_backward_get_workspace_size
            _, executor = call(g, x, t, reduction, out, npu_target=target)
            if out.size and out.size <= RUN_MAX_ELEMENTS:
                for a in (g, x, t):
                    a[...] = rng.uniform(-10, 10, a.shape)
                executor.run()
                want = reference.l1_loss_backward(g, x, t, reduction)
                np.testing.assert_array_equal(_bits(out), _bits(want), err_msg=str(case))
