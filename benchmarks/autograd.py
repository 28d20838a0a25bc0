"""padloss inside torch autograd (``padloss.torch``) against torch's own autograd:
the backward of the circular pad and of L1 mean, tiny and large, float32, and
one training step of a small model, patched vs unpatched.

A backward reruns ``y.backward(g, retain_graph=True)`` on one graph built in
setup, the leaf's ``.grad`` reset to None first (as ``zero_grad()`` leaves it),
so no call accumulates. ``track_speedup_*`` times padloss's candidate and
torch's in interleaved rounds in the same process and returns the median of
the per-round ratios (torch's time / padloss's): the goal is at least 10 on the
large pad, and at least 1 on a tiny call.

Skipped in setup where torch is not installed or the commit has no
padloss.torch (asv runs this suite against older commits too).
"""
from __future__ import annotations

import importlib.util
import statistics

from .common import PADDING, PEER, SIZES, _as_torch, _random, timers

PADLOSS_TORCH = "padloss.torch"
IMPLS = [PADLOSS_TORCH, PEER]
BATCH = (8, 3, 64, 64)   # the training step's input and target


def _padloss_torch():
    """padloss.torch, or NotImplementedError (asv's skip) where it cannot run."""
    if importlib.util.find_spec("torch") is None:
        raise NotImplementedError("torch is not installed")
    try:
        import padloss.torch as pt
    except ImportError as exc:
        raise NotImplementedError(f"this commit has no padloss.torch ({exc})") from exc
    if not all(hasattr(pt, name) for name in ("circular_pad2d", "l1_loss", "patch")):
        raise NotImplementedError("this commit's padloss.torch lacks circular_pad2d, l1_loss or patch")
    return pt


def speedup(fn, peer, rounds: int = 7, round_s: float = 0.01) -> float:
    """Median over interleaved rounds of (peer's time / fn's time); each round
    times each about ``round_s`` seconds' worth of calls (at least one)."""
    calls_per_round, time_round = timers("calls_per_round", "time_round")

    fn(), peer()
    calls = [calls_per_round(f, round_s, max_calls=2000) for f in (fn, peer)]
    ratios = []
    for _ in range(rounds):
        ours = time_round(fn, calls[0])
        ratios.append(time_round(peer, calls[1]) / ours)
    return statistics.median(ratios)


class _AutogradBackward:
    params = [["tiny", "large"], IMPLS]
    param_names = ["size", "impl"]
    timeout = 300

    def setup(self, size, impl):
        pt = _padloss_torch()
        import torch
        import torch.nn.functional as F

        shape = SIZES[size]
        self.x, self.g, graphs = self.graphs(pt, torch, F, shape)
        self.backwards = {name: self._rerun(y) for name, y in zip(IMPLS, graphs)}
        self.backward = self.backwards[impl]
        self.backward()   # compiled or loaded, pages touched

    def graphs(self, pt, torch, F, shape):
        """(leaf, gradient, (padloss.torch's output, torch's))"""
        raise NotImplementedError

    def _rerun(self, y):
        x, g = self.x, self.g

        def backward():
            x.grad = None
            y.backward(g, retain_graph=True)
        return backward

    def time_backward(self, size, impl):
        self.backward()

    def track_speedup_vs_torch(self, size, impl):
        """torch autograd's time / padloss.torch's, interleaved (padloss.torch only)."""
        from asv_runner.benchmarks.mark import SkipNotImplemented

        if impl != PADLOSS_TORCH:
            raise SkipNotImplemented("the ratio is padloss.torch's")
        return speedup(self.backwards[PADLOSS_TORCH], self.backwards[PEER])

    track_speedup_vs_torch.unit = "ratio"


class CircularPad2dAutograd(_AutogradBackward):
    """padloss.torch.circular_pad2d(x, 3) vs F.pad(x, (3, 3, 3, 3), mode="circular")."""

    def graphs(self, pt, torch, F, shape):
        left, right, top, bottom = PADDING
        padded = shape[:-2] + (shape[-2] + top + bottom, shape[-1] + left + right)
        g = _as_torch(_random(padded, "float32", 0))
        x = torch.zeros(shape, requires_grad=True)
        return x, g, (pt.circular_pad2d(x, PADDING), F.pad(x, PADDING, mode="circular"))


class L1LossMeanAutograd(_AutogradBackward):
    """padloss.torch.l1_loss(x, t) vs F.l1_loss(x, t), reduction mean."""

    def graphs(self, pt, torch, F, shape):
        x = _as_torch(_random(shape, "float32", 1)).clone().requires_grad_()
        t = _as_torch(_random(shape, "float32", 2))
        return x, torch.tensor(1.0), (pt.l1_loss(x, t), F.l1_loss(x, t))


class TrainingStep:
    """One SGD step (zero_grad, forward, L1 loss, backward, step) of
    Conv2d(3, 8, 3, circular) -> ReLU -> Conv2d(8, 3, 3, circular) on a float32
    batch of 8 x 3 x 64 x 64, inside ``with padloss.torch.patch():`` or unpatched."""

    params = [["patched", "unpatched"]]
    param_names = ["mode"]
    timeout = 300

    def setup(self, mode):
        _padloss_torch()
        # padloss.torch and the training step landed together: every commit this can run
        # on has both (in padloss.bench.peers, or earlier padloss.benchmark).
        try:
            from padloss.bench.peers import PATCHED, UNPATCHED, training_step
        except ImportError:
            from padloss.benchmark import PATCHED, UNPATCHED, training_step

        steps = training_step(BATCH)
        self.steps = {"patched": steps[PATCHED], "unpatched": steps[UNPATCHED]}
        self.step = self.steps[mode]
        self.step()

    def time_step(self, mode):
        self.step()

    def track_speedup_vs_unpatched(self, mode):
        """The unpatched step's time / the patched one's, interleaved (patched only)."""
        from asv_runner.benchmarks.mark import SkipNotImplemented

        if mode != "patched":
            raise SkipNotImplemented("the ratio is the patched step's")
        return speedup(self.steps["patched"], self.steps["unpatched"])

    track_speedup_vs_unpatched.unit = "ratio"
