"""padloss.torch end to end: training an unmodified model under ``patch()``, DDP,
and what ``patch()`` must leave alone.

- Training: a small circular-padded CNN trained with ``nn.L1Loss`` under
  ``padloss.torch.patch()`` learns, is bit-reproducible, matches torch's own
  training up to float rounding, and really runs padloss's kernels (counted by a
  spy on ``padloss.circular_pad2d_backward`` / ``padloss.l1_loss_backward``,
  which padloss.torch.ops looks up at call time).
- DDP: two gloo processes, each on half the batch, give the full-batch gradients.
- Hygiene: pads padloss does not take stay torch's (values, gradients, and no
  padloss call); ``torch.nn.functional`` is restored exactly after ``with``
  (also on an exception), nested patches and plain ``patch()``/``unpatch()``.
"""
from __future__ import annotations

import collections
import datetime
import functools
import os
import socket
import time

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import padloss  # noqa: E402
import padloss.torch  # noqa: E402
from padloss.torch import ops, patching  # noqa: E402

ORIGINAL_PAD = F.pad
ORIGINAL_L1 = F.l1_loss
BATCH, CHANNELS, SIZE = 4, 3, 16
STEPS = 20
LR, MOMENTUM = 0.1, 0.9
SPIED = ("circular_pad2d_backward", "l1_loss_backward")


# ---------------------------------------------------------------- shared helpers
# (module level: the DDP children import this module to unpickle their function)

def make_model(explicit: bool = False) -> nn.Module:
    """The test CNN with fixed initial parameters. ``explicit``: the same network
    written with padloss.torch's modules instead of padding_mode="circular"
    (parameter creation consumes the RNG identically, so the parameters are equal)."""
    torch.manual_seed(0)
    if explicit:
        return nn.Sequential(padloss.torch.CircularPad2d(1), nn.Conv2d(CHANNELS, 8, 3), nn.ReLU(),
                             padloss.torch.CircularPad2d(1), nn.Conv2d(8, CHANNELS, 3))
    return nn.Sequential(nn.Conv2d(CHANNELS, 8, 3, padding=1, padding_mode="circular"), nn.ReLU(),
                         nn.Conv2d(8, CHANNELS, 3, padding=1, padding_mode="circular"))


def make_batch() -> tuple["torch.Tensor", "torch.Tensor"]:
    """A fixed random input; the target is it shifted one pixel, circularly: a task
    the circular CNN can learn (an independent random target leaves the L1 loss
    near its floor from the start)."""
    x = torch.randn(BATCH, CHANNELS, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    return x, torch.roll(x, shifts=1, dims=-1)


def install_spy(setattr_) -> collections.Counter:
    """Count calls of padloss's two public backward kernels, and L1 backwards run from the
    plan their forward made (padloss.torch.ops.run_prepared_l1), as l1_loss_backward's
    (setattr_: how to replace)."""
    calls: collections.Counter = collections.Counter()
    for name in SPIED:
        original = getattr(padloss, name)

        @functools.wraps(original)      # ops.py reads the kernel's __name__
        def counting(*args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        setattr_(padloss, name, counting)

    def counting_prepared(prepared, grad, _original=ops.run_prepared_l1):
        result = _original(prepared, grad)
        calls["l1_loss_backward"] += result is not None
        return result

    setattr_(ops, "run_prepared_l1", counting_prepared)
    return calls


@pytest.fixture
def spy(monkeypatch) -> collections.Counter:
    return install_spy(monkeypatch.setattr)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One torch thread for the module (bit-reproducible CPU convolutions; the machine
    is small). padloss's first kernel launch keeps it (test_torch_autograd checks that)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def clean_patch_state():
    """Every test starts and ends unpatched."""
    assert not patching.is_patched() and F.pad is ORIGINAL_PAD and F.l1_loss is ORIGINAL_L1
    try:
        yield
    finally:
        leaked = patching.is_patched() or F.pad is not ORIGINAL_PAD or F.l1_loss is not ORIGINAL_L1
        padloss.torch.unpatch()
        assert not leaked, "a test left torch.nn.functional patched"


def train(explicit: bool = False, steps: int = STEPS) -> tuple[list[float], list["torch.Tensor"]]:
    """SGD on the fixed batch; the loss before each step, and the final parameters."""
    model = make_model(explicit)
    x, target = make_batch()
    loss_fn = padloss.torch.L1Loss() if explicit else nn.L1Loss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


# ---------------------------------------------------------------- 1. training

def test_training_under_patch_learns_reproducibly_and_matches_torch(spy):
    torch_losses, torch_params = train()
    assert sum(spy.values()) == 0, "padloss ran without the patch"

    with padloss.torch.patch():
        first_losses, first_params = train()
        # The first conv's input needs no gradient: its pad stays torch's; the second
        # conv's pad and the loss take padloss's backward, once per step each.
        assert spy == {"circular_pad2d_backward": STEPS, "l1_loss_backward": STEPS}
        second_losses, second_params = train()
    assert spy == {"circular_pad2d_backward": 2 * STEPS, "l1_loss_backward": 2 * STEPS}

    # It learns: the loss falls clearly (about 0.84 to 0.43).
    assert first_losses[0] > 0.7
    assert first_losses[-1] < 0.6 * first_losses[0]

    # Bit-reproducible: the same curve and the same parameters, run after run.
    assert first_losses == second_losses
    assert all(torch.equal(a, b) for a, b in zip(first_params, second_params))

    # torch's own run: convolutions are torch's in both; padloss's L1 and pad
    # gradients may differ from torch's only by float32 rounding (the order of the
    # wrapped sums, the rounding of the mean's factor). Here they are in fact bit-equal;
    # a change of torch's thread count alone moves the curve by about 1e-7.
    torch.testing.assert_close(torch.tensor(first_losses), torch.tensor(torch_losses),
                               rtol=1e-6, atol=1e-7)
    for ours, theirs in zip(first_params, torch_params):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert torch.get_num_threads() == 1, "the runs compared did not all use one torch thread"

    # Once the patch is left, padloss is not called again.
    spy.clear()
    after_losses, _ = train(steps=2)
    assert sum(spy.values()) == 0
    assert after_losses == torch_losses[:2]


def test_explicit_padloss_modules_train_exactly_as_the_patch(spy):
    """padloss.torch.CircularPad2d + Conv2d(padding=0) + padloss.torch.L1Loss is the
    same computation as the patched unmodified model, bit for bit."""
    explicit_losses, explicit_params = train(explicit=True)
    assert spy == {"circular_pad2d_backward": STEPS, "l1_loss_backward": STEPS}
    with padloss.torch.patch():
        patched_losses, patched_params = train()
    assert explicit_losses == patched_losses
    assert all(torch.equal(a, b) for a, b in zip(explicit_params, patched_params))


# ---------------------------------------------------------------- 2. DDP

def ddp_worker(rank: int, world_size: int, init_method: str, out_dir: str) -> None:
    """One DDP rank (spawned; imports this module, nothing of pytest's state)."""
    os.environ["NUMBA_NUM_THREADS"] = "1"
    import torch as torch_
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch_.set_num_threads(1)
    calls = install_spy(setattr)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    try:
        model = make_model()
        ddp = DistributedDataParallel(model)
        x, target = make_batch()
        part = slice(rank * BATCH // world_size, (rank + 1) * BATCH // world_size)
        with padloss.torch.patch():
            loss = nn.L1Loss(reduction="mean")(ddp(x[part]), target[part])
            loss.backward()
        torch_.save({"grads": {name: p.grad.detach().clone() for name, p in model.named_parameters()},
                     "loss": loss.detach(), "calls": dict(calls)},
                    os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def joined(context, results: list) -> bool:
    """Whether the spawned ranks have all exited. torch 2.14.1 on Python 3.13.0 aborts a
    gloo process now and then as it exits, after its work (1 run in 7 here, padloss or not;
    tests/test_docs_examples.py): that counts as an exit once every rank saved its results."""
    import torch.multiprocessing as mp

    try:
        return context.join(timeout=5)
    except mp.ProcessExitedException as exc:
        if exc.signal_name == "SIGABRT" and all(path.exists() for path in results):
            for process in context.processes:
                process.join(10)
            return True
        raise


def test_ddp_two_ranks_give_the_full_batch_gradients(tmp_path, monkeypatch):
    import torch.multiprocessing as mp

    world_size, deadline_s = 2, 180.0
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")    # inherited by the spawned children
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    context = mp.start_processes(ddp_worker, args=(world_size, f"tcp://127.0.0.1:{free_port()}",
                                                   str(tmp_path)),
                                 nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + deadline_s
    try:
        while not joined(context, [tmp_path / f"rank{rank}.pt" for rank in range(world_size)]):
            if time.monotonic() > deadline:
                pytest.fail(f"DDP children did not finish within {deadline_s:.0f} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
                process.join(10)
                if process.is_alive():
                    process.kill()

    results = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(world_size)]
    for result in results:
        assert result["calls"]["circular_pad2d_backward"] == 1   # the second conv's pad
        assert result["calls"]["l1_loss_backward"] == 1

    # The single-process full-batch gradients: each rank's mean is over its half,
    # DDP averages over the ranks, which is the full batch's mean.
    model = make_model()
    x, target = make_batch()
    with padloss.torch.patch():
        loss = nn.L1Loss(reduction="mean")(model(x), target)
        loss.backward()
    expected = {name: p.grad for name, p in model.named_parameters()}

    # One fixed batch, no drawn data: the ranks' halves re-associate float32 sums of the
    # full batch's (the loss, each weight's gradient), which moves them by about 1e-7 here.
    torch.testing.assert_close((results[0]["loss"] + results[1]["loss"]) / 2, loss.detach(),
                               rtol=1e-6, atol=1e-7)
    for result in results:
        assert result["grads"].keys() == expected.keys()
        for name, grad in expected.items():
            assert grad.abs().max() > 1e-3, name          # a real gradient, not zeros
            torch.testing.assert_close(result["grads"][name], grad, rtol=1e-5, atol=1e-6,
                                       msg=lambda m, name=name: f"{name}: {m}")
    # all-reduce leaves every rank with the very same gradients
    for name in expected:
        assert torch.equal(results[0]["grads"][name], results[1]["grads"][name]), name


# ---------------------------------------------------------------- 3. patch() hygiene

# (input shape, pad, mode): calls F.pad under the patch leaves entirely to torch.
TORCH_PADS = {
    "reflect": ((2, 3, 5, 6), (1, 2, 2, 1), "reflect"),
    "constant": ((2, 3, 5, 6), (1, 2, 2, 1), "constant"),
    "circular 1-D on 2-D": ((3, 6), (2, 1), "circular"),
    "circular 1-D on 3-D": ((2, 3, 6), (2, 1), "circular"),
    "circular 3-D on 5-D": ((1, 2, 3, 4, 5), (1, 1, 2, 1, 1, 2), "circular"),
    "circular pad == size": ((1, 2, 3, 4), (4, 0, 1, 1), "circular"),   # torch allows, padloss refuses
}


def pad_and_grad(shape, pad, mode):
    """F.pad (as torch.nn.functional holds it now) and the input's gradient, for
    fixed inputs; integer-valued gradients keep every sum exact."""
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(shape, generator=generator).requires_grad_()
    out = F.pad(x, pad, mode=mode)
    grad_out = torch.randint(-8, 9, out.shape, generator=generator).to(out.dtype)
    out.backward(grad_out)
    return out.detach(), x.grad


@pytest.mark.parametrize("case", TORCH_PADS)
def test_pads_padloss_does_not_take_stay_torchs(case, spy):
    shape, pad, mode = TORCH_PADS[case]
    expected_out, expected_grad = pad_and_grad(shape, pad, mode)
    with padloss.torch.patch():
        assert F.pad is patching.pad
        out, grad = pad_and_grad(shape, pad, mode)
    assert torch.equal(out, expected_out)
    assert torch.equal(grad, expected_grad)
    assert sum(spy.values()) == 0


def test_circular_2d_pad_takes_padloss_and_matches_torch(spy):
    """The positive control for the case above: the same helper, a pad padloss takes."""
    case = ((2, 3, 5, 6), (1, 2, 2, 1), "circular")
    expected_out, expected_grad = pad_and_grad(*case)
    with padloss.torch.patch():
        out, grad = pad_and_grad(*case)
    assert spy == {"circular_pad2d_backward": 1}
    assert torch.equal(out, expected_out)
    assert torch.equal(grad, expected_grad)


@pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated")
def test_l1_calls_padloss_does_not_take_stay_torchs(spy):
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(4, 5, generator=generator, requires_grad=True)
    target = torch.randn(4, 5, generator=generator)
    with padloss.torch.patch():
        with torch.no_grad():                                    # no gradient wanted
            assert torch.equal(F.l1_loss(x, target), ORIGINAL_L1(x, target))
        # Legacy arguments (nn.L1Loss(reduce=False) would turn them into a reduction
        # at construction, so call F.l1_loss with them).
        F.l1_loss(x, target, reduce=False).sum().backward()
    assert torch.equal(x.grad, torch.sign(x.detach() - target))
    assert sum(spy.values()) == 0


def test_with_block_restores_torch_functions_exactly(spy):
    with padloss.torch.patch() as active:
        assert isinstance(active, patching.Patch)
        assert torch.nn.functional.pad is patching.pad
        assert torch.nn.functional.l1_loss is patching.l1_loss
    assert torch.nn.functional.pad is ORIGINAL_PAD
    assert torch.nn.functional.l1_loss is ORIGINAL_L1
    assert not patching.is_patched()

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with padloss.torch.patch():
            assert torch.nn.functional.pad is patching.pad
            raise Boom
    assert torch.nn.functional.pad is ORIGINAL_PAD
    assert torch.nn.functional.l1_loss is ORIGINAL_L1
    assert not patching.is_patched()

    # and unmodified code is torch's again
    pad_and_grad((2, 3, 5, 6), (1, 2, 2, 1), "circular")
    assert sum(spy.values()) == 0


def test_nested_patch_keeps_the_outer_active(spy):
    with padloss.torch.patch():
        with padloss.torch.patch():
            assert F.pad is patching.pad
        assert F.pad is patching.pad and F.l1_loss is patching.l1_loss
        assert patching.is_patched()
        pad_and_grad((2, 3, 5, 6), (1, 2, 2, 1), "circular")
        assert spy["circular_pad2d_backward"] == 1
    assert F.pad is ORIGINAL_PAD and F.l1_loss is ORIGINAL_L1
    assert not patching.is_patched()


def test_plain_patch_then_unpatch_restores(spy):
    padloss.torch.patch()
    try:
        assert F.pad is patching.pad and F.l1_loss is patching.l1_loss
        x = torch.randn(2, 3, requires_grad=True)
        F.l1_loss(x, torch.zeros(2, 3)).backward()
        assert spy == {"l1_loss_backward": 1}
        padloss.torch.patch()           # counted twice: unpatch() undoes every patch
    finally:
        padloss.torch.unpatch()
    assert F.pad is ORIGINAL_PAD and F.l1_loss is ORIGINAL_L1
    assert not patching.is_patched()
    padloss.torch.unpatch()             # harmless when nothing is patched
    assert F.pad is ORIGINAL_PAD
