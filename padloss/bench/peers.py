"""The peer frameworks, torch and JAX, each timed in a child process of its own.

After each parallel op their threads spin for a while (docs/performance.md, "Peers in
processes of their own"), so nothing of theirs runs in the process that times
padloss's kernels: the bench starts one child per
peer (``python -m padloss.child peer SPEC``), which imports its framework
while the parent compiles, waits for the parent's go, times its workloads and
prints its report. Also here: the rows through torch autograd (padloss.torch
against torch's own) and a small model's training step, patched and not.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from typing import Callable

import padloss

from ..catalogue import BENCHED
from . import rounds
from .workloads import AUTOGRAD_PADLOSS, TORCH_BACKENDS, Workload, jax_candidates, torch_candidates, workload

PEERS = ("torch", "jax")
PATCHED = "patched"
UNPATCHED = "unpatched"
STEP = "training step"
STEP_BATCH = (8, 3, 64, 64)
"""The training step's input (and target) shape: batch, channels, height, width."""
STEP_MODEL = 'Conv2d(3, 8, 3) -> ReLU -> Conv2d(8, 3, 3), both padding=1, padding_mode="circular"'
"""The training step's model; nn.L1Loss and plain SGD (STEP_LR) train it."""
STEP_LR = 1e-3


def autograd_backward(w: Workload) -> dict[str, Callable[[], object]]:
    """``w``'s forward built once through :mod:`padloss.torch` and once through
    torch alone (``Workload.torch_graphs``), and a callable per graph that reruns
    its backward: ``y.backward(g, retain_graph=True)``, the leaf's ``.grad`` reset
    to None first (as ``zero_grad()`` leaves it), so each call is the backward and
    the gradient's assignment, never an accumulation. padloss.torch first, torch's
    own autograd last; PadlossError where padloss.torch refuses the case."""
    x, g, graphs = w.torch_graphs()

    def rerun(y):
        def backward():
            x.grad = None
            y.backward(g, retain_graph=True)
        return backward

    return {name: rerun(y) for name, y in graphs.items()}


def training_step(batch: tuple[int, ...] = STEP_BATCH) -> dict[str, Callable[[], object]]:
    """One SGD step (learning rate STEP_LR) of the small model of :data:`STEP_MODEL`
    on a float32 batch: zero_grad, forward, L1 loss, backward, step. Two copies of
    the same initial model: one steps inside
    ``with padloss.torch.patch():`` (entered and left every call, a few
    microseconds), the other unpatched. Under the patch padloss takes the
    second conv's circular pad (the first one's input needs no gradient, so it
    stays torch's) and the loss."""
    import copy

    import torch
    from torch import nn

    import padloss.torch as pt

    with torch.random.fork_rng(devices=[]):   # leaves the caller's random state alone
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, padding_mode="circular"), nn.ReLU(),
                              nn.Conv2d(8, 3, 3, padding=1, padding_mode="circular"))
        x, target = torch.randn(batch), torch.randn(batch)
    loss_fn = nn.L1Loss()

    def stepper():
        m = copy.deepcopy(model)
        params = list(m.parameters())

        def step():
            for p in params:                  # zero_grad()
                p.grad = None
            loss_fn(m(x), target).backward()
            with torch.no_grad():             # SGD's step, written out: torch.optim's first use imports
                for p in params:              # torch._dynamo, 1.4 s of the quick bench
                    p.add_(p.grad, alpha=-STEP_LR)
        return step

    plain, inner = stepper(), stepper()

    def patched():
        with pt.patch():
            inner()

    return {PATCHED: patched, UNPATCHED: plain}


def installed(peer: str) -> bool:
    """Whether the peer framework can be imported (it is not imported here)."""
    return importlib.util.find_spec(peer) is not None


def padloss_torch_missing() -> str | None:
    """Why padloss.torch cannot be timed here, or None when it can (imports torch)."""
    try:
        import padloss.torch  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def peer_side(spec: dict) -> None:
    """The bench's timings of one peer framework (``spec["peer"]``), run in a child
    process: per workload, for torch the padloss backends of ``spec["backends"]`` that
    run its ops, its autograd and native kernel, then the rows through torch
    autograd and the training step; for jax its jitted vjp. It first imports its
    framework (torch also makes each tiny call once, untimed: their lazy start-ups)
    and waits for a line on stdin, the parent's go. Prints "step <label>" as each
    workload starts, then "report <json>"."""
    args = argparse.Namespace(**spec)
    not_measured: dict[str, str] = {}
    through_autograd, threads = False, None   # the padloss.torch rows: torch's child, where it imports
    if args.peer == "torch":
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        threads = torch.get_num_threads()
        missing = padloss_torch_missing()
        through_autograd = missing is None
        if missing is not None:
            not_measured[AUTOGRAD_PADLOSS] = missing
        padloss.available_backends()   # imports each backend (Numba's loads its kernels after the go)
        for op in BENCHED:   # lazy start-ups (torch's autograd, padloss's torch backend), untimed
            warm, _ = torch_candidates(workload(op, "float32", "tiny", args.reduction),
                                       args.backends)
            for fn, _ in warm.values():
                fn()
    else:
        import jax.numpy  # noqa: F401  (its import, while the parent still compiles)
    sys.stdin.readline()   # the parent's go: its compiles are done and nothing else runs

    def step(label: str) -> None:
        print("step", label, flush=True)

    results, autograd = {}, []
    for op, size, dtype in rounds.workloads(args):
        step(f"{op}, {size}, {dtype}: {args.peer}")
        w = workload(op, dtype, size, args.reduction)
        if args.peer == "torch":
            found, refused = torch_candidates(w, args.backends)
        else:
            found, refused = jax_candidates(w), {}
        # nothing here compiles on its first timed call: torch compiles nothing (padloss's backends
        # here were called once), and jax_candidates made each jitted vjp's compiling call
        timed = rounds.time_candidates(w, found, refused, args, not_measured, args.peer, compiles=False)
        results[f"{op} {size} {dtype}"] = [list(r) for r in timed.values()]
        if through_autograd and size in rounds.autograd_sizes(args):
            step(f"{op} through torch autograd, {size}, {dtype}")
            autograd += rounds.autograd_backward_rows(w, size, dtype, args, not_measured)
    if through_autograd:
        step("training step, patched and not")
        autograd += rounds.autograd_rows(STEP, None, STEP_BATCH, "float32", training_step(), args)
    print("report", json.dumps(dict(results=results, autograd=autograd, not_measured=not_measured,
                                    threads=threads)), flush=True)




def steps(args: argparse.Namespace, peer: str) -> int:
    """How many progress steps a peer's child takes."""
    sizes = len(rounds.peer_sizes(args))
    if peer == "torch":
        sizes += len(rounds.autograd_sizes(args))
        return sizes * len(args.dtypes) * len(BENCHED) + 1
    return sizes * len(args.dtypes) * len(BENCHED)


def timed(args: argparse.Namespace) -> dict[str, str | None]:
    """Each peer framework -> None when it is timed, else why not (a peer whose child would
    take no step, e.g. JAX under ``--quick --sizes large``, is not started)."""
    why = {}
    for peer in PEERS:
        if not installed(peer):
            why[peer] = "not installed"
        elif getattr(args, f"no_{peer}"):
            why[peer] = f"--no-{peer}"
        elif steps(args, peer) == 0:
            why[peer] = f"--quick (`padloss bench` times it at {', '.join(args.sizes)})"
        else:
            why[peer] = None
    return why


def start(args: argparse.Namespace, backends: list[str]) -> dict[str, subprocess.Popen]:
    """Start each timed peer's child (peer_side). It imports its framework and warms it
    up while this process compiles, then waits: :func:`report` sets it timing once
    nothing else runs."""
    spec = dict(sizes=rounds.peer_sizes(args), dtypes=args.dtypes, reduction=args.reduction,
                rounds=args.rounds, round_s=args.round_s, quick=args.quick, threads=args.threads,
                backends=[b for b in backends if b in TORCH_BACKENDS])
    return {peer: subprocess.Popen([sys.executable, "-m", "padloss.child", "peer",
                                    json.dumps(dict(spec, peer=peer))],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for peer, why in timed(args).items() if why is None}


def report(peer: str, child: subprocess.Popen, progress) -> dict:
    """Let a started peer child time its workloads, its steps drawn on ``progress``; its report."""
    try:
        child.stdin.write("go\n")
        child.stdin.close()
    except BrokenPipeError:   # it died while starting: its errors are above, its exit status below
        pass
    found = None
    for line in child.stdout:
        kind, _, rest = line.rstrip("\n").partition(" ")
        if kind == "step":
            progress.step(rest)
        elif kind == "report":
            found = json.loads(rest)
    if child.wait() != 0 or found is None:
        raise RuntimeError(f"padloss bench: the child process timing {peer} failed (see its errors above)")
    return found
