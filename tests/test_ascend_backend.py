"""The ``ascend`` backend without an NPU: availability, selection, the device-generic
plans it falls back to (run here on torch's CPU device), and the npu-only branches.

There is no Ascend NPU on these machines. The tests marked MARSHALLING substitute a
minimal fake ``torch.ops.npu`` or a fake CANN op library only to check what is passed
to the native op and how its result reaches grad_input; they say nothing about the
native kernels' numerics, which are open questions until run on hardware (docs/ascend.md).
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import types

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import padloss  # noqa: E402
from padloss import Status, reference, torch_compat  # noqa: E402
from padloss.arrays import TensorMeta  # noqa: E402
from padloss.dispatch import select_backend  # noqa: E402
from padloss.problem import Problem  # noqa: E402
from padloss_ascend import aclnn_pad, ascend_backend, availability, npu  # noqa: E402
from padloss_torch import l1 as torch_l1  # noqa: E402
from padloss_torch import pad as torch_pad  # noqa: E402
from padloss_torch.availability import torch_availability  # noqa: E402
from padloss_torch.buffers import on_stream  # noqa: E402

PAD = "circular_pad2d_backward"
L1 = "l1_loss_backward"


def meta(t: "torch.Tensor") -> TensorMeta:
    return TensorMeta(str(t.dtype).removeprefix("torch."), tuple(t.shape), tuple(t.stride()))


def problem_on_npu(op: str, tensors, params) -> Problem:
    """The Problem padloss would build for these tensors if they lived on npu:0."""
    return Problem(op, "npu:0", tuple(meta(t) for t in tensors), tuple(params))


@pytest.fixture
def npu_available(monkeypatch):
    monkeypatch.setattr(ascend_backend, "ascend_availability", lambda: (True, ""))


@pytest.fixture
def no_op_library(monkeypatch):
    monkeypatch.setattr(aclnn_pad, "op_library", lambda: None)


# --- availability: why not, without importing anything ------------------------------------------


@pytest.mark.skipif("torch_npu" in sys.modules, reason="torch_npu is imported")
def test_reason_torch_npu_not_installed(monkeypatch):
    monkeypatch.setattr(availability, "importable", lambda name: name != "torch_npu")
    info = {b.name: b for b in padloss.available_backends()}["ascend"]
    assert not info.available and info.devices == ("npu",)
    assert info.reason == ("torch_npu is not installed (install the torch_npu release built for your "
                           "torch and CANN: docs/ascend.md)")


def test_reason_cann_runtime_missing_then_not_imported(monkeypatch, tmp_path):
    monkeypatch.setattr(availability, "importable", lambda name: True)
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    ok, reason = availability.ascend_availability()
    assert not ok and reason.startswith("the CANN runtime is missing: libascendcl.so")
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libascendcl.so").touch()
    assert availability.ascend_availability() == (
        False, "torch_npu is installed but not imported (import torch_npu to use the NPU)")


@pytest.mark.parametrize("devices, expected", [
    (0, (False, "torch_npu is imported but finds no NPU device")),
    (1, (True, "")),
])
def test_reason_no_device_or_available(monkeypatch, devices, expected):
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    fake_npu = types.SimpleNamespace(is_available=lambda: devices > 0, device_count=lambda: devices)
    monkeypatch.setattr(torch, "npu", fake_npu, raising=False)
    assert availability.ascend_availability() == expected


def test_a_blocked_module_counts_as_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    assert not availability.importable("torch_npu")
    assert torch_availability() == (True, "")


# --- selection ------------------------------------------------------------------------------------


def pad_tensors():
    return torch.ones(2, 3, 7, 9), torch.empty(2, 3, 5, 5)


@pytest.mark.skipif("torch_npu" in sys.modules, reason="torch_npu is imported")
def test_ascend_on_request_without_npu_names_the_reason():
    go, gi = pad_tensors()
    with pytest.raises(padloss.BackendError, match="backend 'ascend' .* is unavailable: torch_npu is "
                                                   "not installed") as info:
        padloss.circular_pad2d_backward(go, gi, [2, 2, 1, 1], out=gi, backend="ascend")
    assert info.value.status == Status.RUNTIME_ERROR


def test_ascend_on_request_refuses_cpu_data(npu_available):
    go, gi = pad_tensors()
    with pytest.raises(padloss.InvalidArgumentError, match="computes on NPU tensors only"):
        padloss.circular_pad2d_backward(go, gi, [2, 2, 1, 1], out=gi, backend="ascend")


def test_npu_data_goes_to_ascend_automatically(npu_available):
    go, gi = pad_tensors()
    assert select_backend(problem_on_npu(PAD, (go, gi), (2, 2, 1, 1))).name == "ascend"


def test_npu_data_without_npu_backend_names_the_reason(monkeypatch):
    monkeypatch.setattr(ascend_backend, "ascend_availability", lambda: (False, "why not"))
    go, gi = pad_tensors()
    with pytest.raises(padloss.BackendError, match="on device 'npu:0' \\(ascend: why not\\)"):
        select_backend(problem_on_npu(PAD, (go, gi), (2, 2, 1, 1)))


def test_float64_is_a_cpu_extension(npu_available):
    go, gi = torch.ones(1, 2, 5, 5, dtype=torch.float64), torch.empty(1, 2, 3, 3, dtype=torch.float64)
    why = ascend_backend.AscendBackend().supports(problem_on_npu(PAD, (go, gi), (1, 1, 1, 1)))
    assert "float64 is a CPU extension" in why


# --- the fallback plans an NPU call gets, run here on torch's CPU device ---------------------------


def test_pad_falls_back_to_torch_ops_and_matches_reference(no_op_library):
    rng = np.random.default_rng(0)
    values = rng.standard_normal((2, 3, 9, 8)).astype(np.float16)
    go, gi = torch.from_numpy(values), torch.empty(2, 3, 6, 5, dtype=torch.float16)
    plan = ascend_backend.AscendBackend().compile(problem_on_npu(PAD, (go, gi), (2, 1, 2, 1)))
    assert isinstance(plan, torch_pad.TorchCircularPadPlan) and plan.workspace_size == 0
    plan.run((go, gi), None, None)
    np.testing.assert_array_equal(gi.numpy(),
                                  reference.circular_pad2d_backward(values, gi.shape, (2, 1, 2, 1)))


def test_l1_falls_back_to_torch_ops_when_torch_npu_lacks_the_op(monkeypatch):
    monkeypatch.setattr(torch.ops, "npu", types.SimpleNamespace(), raising=False)
    rng = np.random.default_rng(1)
    s_values = rng.standard_normal((3, 4)).astype(ml_dtypes.bfloat16)
    g, t = torch.tensor(2.0), torch.zeros(4, dtype=torch.bfloat16)
    s = torch.from_numpy(s_values.view(np.int16)).view(torch.bfloat16)
    gi = torch.empty(3, 4, dtype=torch.bfloat16)
    plan = ascend_backend.AscendBackend().compile(problem_on_npu(L1, (g, s, t, gi), (1,)))
    assert isinstance(plan, torch_l1.TorchL1Plan)
    plan.run((g, s, t, gi), None, None)
    expected = reference.l1_loss_backward(g.numpy(), s_values, np.zeros(4, ml_dtypes.bfloat16), "mean",
                                          out_dtype=ml_dtypes.bfloat16)
    np.testing.assert_array_equal(gi.view(torch.int16).numpy(), expected.view(np.int16))


# --- MARSHALLING: torch.ops.npu.l1_loss_backward, faked ----------------------------------------


class FakeNpuOps:
    """MARSHALLING ONLY: stands in for torch.ops.npu. Records the arguments and returns
    what the real op allocates (the broadcast shape, in torch's promotion of the
    arguments' dtypes), filled with ``fill``; it computes nothing."""

    def __init__(self, fill: float, shape=None):
        self.fill, self.shape, self.calls = fill, shape, []

    def l1_loss_backward(self, grad_output, self_, target, reduction):
        self.calls.append((grad_output, self_, target, reduction))
        dtype = torch.promote_types(grad_output.dtype, torch.result_type(target, self_))
        shape = self.shape or torch.broadcast_shapes(grad_output.shape, self_.shape, target.shape)
        return torch.full(shape, self.fill, dtype=dtype)


def run_native_l1(monkeypatch, fake, g, s, t, gi, reduction):
    monkeypatch.setattr(torch.ops, "npu", fake, raising=False)
    plan = npu.l1_plan(problem_on_npu(L1, (g, s, t, gi), (reduction,)))
    assert isinstance(plan, npu.NativeL1Plan)
    plan.run((g, s, t, gi), None, None)
    (call,) = fake.calls
    return call


def test_marshalling_native_l1_same_dtype_passes_inputs_as_they_are(monkeypatch):
    fake = FakeNpuOps(0.25)
    g, s, t = torch.tensor(1.0, dtype=torch.float16), torch.randn(3, 4).half(), torch.randn(4).half()
    gi = torch.empty(3, 4, dtype=torch.float16)
    go_arg, s_arg, t_arg, reduction = run_native_l1(monkeypatch, fake, g, s, t, gi, 1)
    assert go_arg is g and s_arg is s and t_arg is t       # no cast, no copy
    assert reduction == 1 and type(reduction) is int       # the aclnn code: mean
    assert (gi == 0.25).all()


def test_marshalling_native_l1_mixed_floats_meet_in_float32(monkeypatch):
    # P = f32 (f16 + bf16); a 0-d float32 grad_output would lose torch's promotion, so
    # every input is widened (exactly) to float32 before the op allocates its output.
    fake = FakeNpuOps(0.5)
    g, s, t = torch.tensor(3.0), torch.randn(2, 3).half(), torch.randn(2, 3).to(torch.bfloat16)
    gi = torch.empty(2, 3)
    args = run_native_l1(monkeypatch, fake, g, s, t, gi, 0)[:3]
    assert [a.dtype for a in args] == [torch.float32] * 3
    assert torch.equal(args[1], s.float()) and torch.equal(args[2], t.float())
    assert (gi == 0.5).all()


def test_marshalling_native_l1_integers_become_p(monkeypatch):
    fake = FakeNpuOps(1.0)
    g, s, t = torch.tensor(1.0).half(), torch.tensor([[3, -2049]], dtype=torch.int32), torch.zeros(2).half()
    gi = torch.empty(1, 2, dtype=torch.float16)
    _, s_arg, _, _ = run_native_l1(monkeypatch, fake, g, s, t, gi, 2)
    assert s_arg.dtype == torch.float16 and s_arg.tolist() == [[3.0, -2048.0]]   # one RNE rounding


def test_marshalling_native_l1_downcast_output_rounds_once_to_even(monkeypatch):
    # P = f32, grad_input f16: the op works in float32 and the copy rounds once; the fake's
    # 1 + 2**-11 is a float16 tie, which the spec's nearest-even cast sends to 1.0.
    fake = FakeNpuOps(1 + 2**-11)
    g, s, t = torch.tensor(1.0), torch.randn(5), torch.randn(5)
    gi = torch.empty(5, dtype=torch.float16)
    args = run_native_l1(monkeypatch, fake, g, s, t, gi, 0)[:3]
    assert [a.dtype for a in args] == [torch.float32] * 3
    assert (gi == 1.0).all()


def test_marshalling_native_l1_wrong_output_shape_is_an_error(monkeypatch):
    fake = FakeNpuOps(1.0, shape=(4,))
    g, s, t = torch.tensor(1.0), torch.randn(3, 4), torch.randn(4)
    gi = torch.full((3, 4), 7.0)
    with pytest.raises(padloss.BackendError, match="returned shape \\(4,\\), expected .* \\(3, 4\\)"):
        run_native_l1(monkeypatch, fake, g, s, t, gi, 0)
    assert (gi == 7.0).all()


# --- MARSHALLING: aclnnCircularPad2dBackward through a faked CANN op library ----------------------


class FakeFunction:
    """One C function of the fake library: records its raw arguments; ``restype`` and
    ``argtypes`` are accepted like a ctypes function's."""

    def __init__(self, lib, name, result):
        self.lib, self.name, self.result = lib, name, result

    def __call__(self, *args):
        self.lib.calls.append((self.name, args))
        return self.result(*args)


class FakeOpLibrary:
    """MARSHALLING ONLY: stands in for libopapi.so. Handles are small integers; the
    workspace size and statuses are chosen by the test; nothing is computed."""

    def __init__(self, workspace_size=64, status=0):
        self.calls, self._next = [], 100
        results = {
            "aclCreateTensor": lambda *a: self._handle(),
            "aclDestroyTensor": lambda h: 0,
            "aclCreateIntArray": lambda *a: self._handle(),
            "aclDestroyIntArray": lambda h: 0,
            "aclnnCircularPad2dBackwardGetWorkspaceSize": self._get_workspace_size,
            "aclnnCircularPad2dBackward": lambda *a: 0,
        }
        self._workspace_size, self._status = workspace_size, status
        for name, result in results.items():
            setattr(self, name, FakeFunction(self, name, result))

    def _handle(self):
        self._next += 1
        return self._next

    def _get_workspace_size(self, go, self_, pads, gi, size_ref, executor_ref):
        size_ref._obj.value = self._workspace_size
        executor_ref._obj.value = 0xE0
        return self._status

    def called(self, name):
        return [args for n, args in self.calls if n == name]


def decode_tensor(args):
    dims, ndim, dtype, strides, offset, fmt, storage_dims, nstorage, data = args
    return dict(dims=list(dims[:ndim]), dtype=dtype, strides=list(strides[:ndim]), offset=offset,
                format=fmt, storage=list(storage_dims[:nstorage]), data=data)


@pytest.mark.parametrize("dtype, code", [(torch.float32, 0), (torch.float16, 1), (torch.bfloat16, 27)])
def test_marshalling_acl_tensor_describes_the_view_in_place(dtype, code):
    lib = FakeOpLibrary()
    base = torch.empty(2, 3, 8, 9, dtype=dtype)
    view = base[:, :, 1:, ::2]
    aclnn_pad.acl_tensor(lib, view)
    (args,) = lib.called("aclCreateTensor")
    assert decode_tensor(args) == dict(dims=[2, 3, 7, 5], dtype=code, strides=[216, 72, 9, 2], offset=9,
                                       format=2, storage=[432], data=base.data_ptr())


class FakeStream:
    npu_stream = 0x5EED


def test_marshalling_aclnn_call_sequence():
    lib = FakeOpLibrary(workspace_size=64)
    go, gi = torch.ones(1, 2, 7, 9, dtype=torch.float16), torch.empty(1, 2, 5, 5, dtype=torch.float16)
    plan = aclnn_pad.AclnnCircularPadPlan(problem_on_npu(PAD, (go, gi), (3, 1, 0, 2)), lib)
    plan.run((go, gi), None, FakeStream())
    names = [n for n, _ in lib.calls]
    assert names == ["aclCreateTensor"] * 3 + ["aclCreateIntArray",
                                               "aclnnCircularPad2dBackwardGetWorkspaceSize",
                                               "aclnnCircularPad2dBackward", "aclDestroyIntArray"] \
        + ["aclDestroyTensor"] * 3
    go_t, self_t, gi_t = (decode_tensor(a) for a in lib.called("aclCreateTensor"))
    assert go_t["dims"] == [1, 2, 7, 9] and go_t["data"] == go.data_ptr()
    assert self_t == gi_t and gi_t["dims"] == [1, 2, 5, 5] and gi_t["data"] == gi.data_ptr()
    ((values, count),) = lib.called("aclCreateIntArray")
    assert list(values[:count]) == [3, 1, 0, 2]                  # [left, right, top, bottom]
    ((h_go, h_self, h_pads, h_gi, _, _),) = lib.called("aclnnCircularPad2dBackwardGetWorkspaceSize")
    assert (h_go, h_self, h_pads, h_gi) == (101, 102, 104, 103)
    ((workspace, size, executor, stream),) = lib.called("aclnnCircularPad2dBackward")
    assert workspace and size == 64 and executor.value == 0xE0 and stream == 0x5EED
    assert sorted(a[0] for a in lib.called("aclDestroyTensor")) == [101, 102, 103]


def test_marshalling_aclnn_current_stream_and_no_workspace(monkeypatch):
    lib = FakeOpLibrary(workspace_size=0)
    device_module = types.SimpleNamespace(current_stream=lambda device: FakeStream())
    monkeypatch.setattr(torch_compat, "device_module", lambda kind: device_module)
    go, gi = torch.ones(1, 1, 3, 3), torch.empty(1, 1, 3, 3)
    aclnn_pad.AclnnCircularPadPlan(problem_on_npu(PAD, (go, gi), (0, 0, 0, 0)), lib).run((go, gi), None, None)
    ((workspace, size, _, stream),) = lib.called("aclnnCircularPad2dBackward")
    assert workspace is None and size == 0 and stream == 0x5EED


def test_marshalling_aclnn_failure_is_an_error_and_frees_everything():
    lib = FakeOpLibrary(status=161002)
    go, gi = torch.ones(1, 1, 5, 5), torch.empty(1, 1, 3, 3)
    plan = aclnn_pad.AclnnCircularPadPlan(problem_on_npu(PAD, (go, gi), (1, 1, 1, 1)), lib)
    with pytest.raises(padloss.BackendError, match="GetWorkspaceSize returned aclnn status 161002"):
        plan.run((go, gi), None, FakeStream())
    assert not lib.called("aclnnCircularPad2dBackward")
    assert len(lib.called("aclDestroyTensor")) == 3 and len(lib.called("aclDestroyIntArray")) == 1


# The aclnn functions as a C library that logs what it receives, so that the ctypes
# signatures (64-bit handles, pointers, out-parameters) meet a real C ABI.
C_STUB = r"""
#include <stdint.h>
int64_t padloss_log[512];
int padloss_n = 0;
static char handles[16];
static int next_handle = 0;
static void put(int64_t v) { padloss_log[padloss_n++] = v; }
static void *new_handle(void) { void *h = &handles[next_handle++]; put((int64_t)h); return h; }

void *aclCreateTensor(const int64_t *dims, uint64_t ndim, int dtype, const int64_t *strides,
                      int64_t offset, int format, const int64_t *storage, uint64_t nstorage,
                      void *data) {
    put(1); put((int64_t)ndim);
    for (uint64_t i = 0; i < ndim; i++) put(dims[i]);
    put(dtype);
    for (uint64_t i = 0; i < ndim; i++) put(strides[i]);
    put(offset); put(format); put((int64_t)nstorage);
    for (uint64_t i = 0; i < nstorage; i++) put(storage[i]);
    put((int64_t)data);
    return new_handle();
}
int aclDestroyTensor(const void *t) { put(2); put((int64_t)t); return 0; }
void *aclCreateIntArray(const int64_t *values, uint64_t n) {
    put(3); put((int64_t)n);
    for (uint64_t i = 0; i < n; i++) put(values[i]);
    return new_handle();
}
int aclDestroyIntArray(const void *a) { put(4); put((int64_t)a); return 0; }
int aclnnCircularPad2dBackwardGetWorkspaceSize(const void *go, const void *self, const void *pads,
                                               void *gi, uint64_t *size, void **executor) {
    put(5); put((int64_t)go); put((int64_t)self); put((int64_t)pads); put((int64_t)gi);
    *size = 48; *executor = &handles[15]; put((int64_t)*executor);
    return 0;
}
int aclnnCircularPad2dBackward(void *workspace, uint64_t size, void *executor, void *stream) {
    put(6); put((int64_t)workspace); put((int64_t)size); put((int64_t)executor); put((int64_t)stream);
    return 0;
}
"""


def read_stub_log(lib) -> list[tuple]:
    n = ctypes.c_int.in_dll(lib, "padloss_n").value
    log = iter((ctypes.c_int64 * 512).in_dll(lib, "padloss_log")[:n])
    take = lambda k: [next(log) for _ in range(k)]  # noqa: E731
    events = []
    for tag in log:
        if tag == 1:
            ndim = next(log)
            dims, dtype, strides = take(ndim), next(log), take(ndim)
            offset, fmt, nstorage = take(3)
            storage, data, handle = take(nstorage), next(log), next(log)
            events.append(("tensor", dims, dtype, strides, offset, fmt, storage, data, handle))
        elif tag == 3:
            count = next(log)
            events.append(("int array", take(count), next(log)))
        else:
            name = {2: "destroy tensor", 4: "destroy int array", 5: "get workspace size", 6: "run"}[tag]
            events.append((name, *take({2: 1, 4: 1, 5: 5, 6: 4}[tag])))
    return events


def test_marshalling_through_a_c_library(monkeypatch, tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    (tmp_path / "lib64").mkdir()
    (tmp_path / "stub.c").write_text(C_STUB)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(tmp_path / "lib64" / "libopapi.so"),
                    str(tmp_path / "stub.c")], check=True)
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    monkeypatch.setattr(padloss.config.current, "ascend_aclnn", True)
    aclnn_pad._load_op_library.cache_clear()
    try:
        lib = aclnn_pad.op_library()
        assert lib is not None
        go = torch.ones(2, 3, 8, 9, dtype=torch.bfloat16)
        gi = torch.empty(2, 3, 12, 5, dtype=torch.bfloat16)[:, :, ::2]       # strided output
        plan = npu.circular_pad_plan(problem_on_npu(PAD, (go, gi), (3, 1, 1, 1)))
        assert isinstance(plan, aclnn_pad.AclnnCircularPadPlan)
        plan.run((go, gi), None, FakeStream())
        events = read_stub_log(lib)
    finally:
        aclnn_pad._load_op_library.cache_clear()
    (go_t, self_t, gi_t), rest = events[:3], events[3:]
    # (dims, aclDataType, strides, storage offset, aclFormat ND, storage dims, data pointer)
    assert go_t[1:8] == ([2, 3, 8, 9], 27, [216, 72, 9, 1], 0, 2, [432], go.data_ptr())
    assert gi_t[1:8] == ([2, 3, 6, 5], 27, [180, 60, 10, 1], 0, 2, [360], gi.data_ptr())
    assert self_t[1:8] == gi_t[1:8]                     # self: grad_input's shape and dtype
    handles = [go_t[-1], self_t[-1], gi_t[-1]]          # 64-bit pointers, passed back intact
    (_, pads, pads_handle), (_, *args, executor), run = rest[:3]
    assert pads == [3, 1, 1, 1] and args == handles[:2] + [pads_handle, handles[2]]
    assert run[0] == "run" and run[1] != 0 and run[2:] == (48, executor, 0x5EED)
    assert rest[3:] == [("destroy int array", pads_handle)] + [("destroy tensor", h) for h in handles]


@pytest.mark.parametrize("dtype, limit", [("float16", 16362), ("bfloat16", 16362), ("float32", 24544)])
def test_native_kernel_only_below_the_width_limit_and_for_non_negative_pads(dtype, limit):
    def fits(width, pads=(1, 1, 1, 1)):
        go, gi = TensorMeta(dtype, (1, 1, 4, width), ()), TensorMeta(dtype, (1, 1, 2, width - 2), ())
        return aclnn_pad.native_kernel_fits(Problem(PAD, "npu:0", (go, gi), pads))
    assert fits(limit - 1) and not fits(limit)
    assert not fits(100, (1, 1, -1, 3))


def test_native_pad_plan_chosen_only_when_the_library_has_it(monkeypatch):
    go, gi = torch.ones(1, 1, 5, 5), torch.empty(1, 1, 3, 3)
    fitting = problem_on_npu(PAD, (go, gi), (1, 1, 1, 1))
    cropping = problem_on_npu(PAD, (torch.ones(1, 1, 5, 1), torch.empty(1, 1, 3, 3)), (-1, -1, 1, 1))
    lib = FakeOpLibrary()
    monkeypatch.setattr(aclnn_pad, "op_library", lambda: lib)
    assert isinstance(npu.circular_pad_plan(fitting), aclnn_pad.AclnnCircularPadPlan)
    assert isinstance(npu.circular_pad_plan(cropping), torch_pad.TorchCircularPadPlan)
    monkeypatch.setattr(aclnn_pad, "op_library", lambda: None)
    assert isinstance(npu.circular_pad_plan(fitting), torch_pad.TorchCircularPadPlan)


def test_op_library_lookup(monkeypatch, tmp_path):
    aclnn_pad._load_op_library.cache_clear()
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    try:
        assert aclnn_pad.op_library() is None                    # no CANN here
        aclnn_pad._load_op_library.cache_clear()
        monkeypatch.setattr(ctypes, "CDLL", lambda path: FakeOpLibrary())
        lib = aclnn_pad.op_library()
        assert lib.aclnnCircularPad2dBackward.argtypes[-1] is ctypes.c_void_p   # typed on load
        with padloss.config.set(ascend_aclnn=False):
            assert aclnn_pad.op_library() is None                # switched off, though loaded
        assert aclnn_pad.op_library() is lib
        aclnn_pad._load_op_library.cache_clear()
        monkeypatch.setattr(ctypes, "CDLL", lambda path: types.SimpleNamespace())
        assert aclnn_pad.op_library() is None                    # a CANN without the op
    finally:
        aclnn_pad._load_op_library.cache_clear()


# --- streams: queued on the caller's stream, never synchronised -----------------------------------


def test_stream_is_made_current_without_a_sync(monkeypatch):
    entered = []

    class StreamContext:
        def __init__(self, stream):
            entered.append(stream)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class FakeDeviceModule:
        stream = StreamContext

        @staticmethod
        def synchronize(*args):
            raise AssertionError("a plan must not wait for its work")

    monkeypatch.setattr(torch_compat, "device_module", lambda kind: FakeDeviceModule)
    stream = object()
    with on_stream(torch.device("cuda"), stream):
        pass
    assert entered == [stream]
    with on_stream(torch.device("cpu"), stream), on_stream(torch.device("cuda"), None):
        pass
    assert entered == [stream]                                  # CPU and None: nothing to switch
