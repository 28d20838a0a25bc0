"""Targets: which Ascend product padloss reproduces, its refusals and its numerics.

A target names a product family as CANN's documents list them. For each op it holds
whether the product runs it, the dtypes it takes (the pad: self's; L1: the promoted
dtype P, which CANN's op_api checks against a list per SoC), the pad's width limit
and the numerics model of the kernel the product runs. docs/targets.md gives each
entry's sources and what is unverified; tests hold this table to that page.

The target of a call: the ops' ``npu_target=`` argument, else the ``target`` setting
(``PADLOSS_TARGET``; ``padloss.config.set(target=...)``, also as a ``with`` block),
else :data:`DEFAULT`: ``spec``, the contract of docs/ with no product's limits (what
padloss did before targets: every result under it is unchanged).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from .errors import BackendError, InvalidArgumentError, PadlossError, Status

PAD = "circular_pad2d_backward"
L1 = "l1_loss_backward"
HALF_AND_SINGLE = frozenset({"float16", "float32"})
NPU = frozenset({"float16", "bfloat16", "float32"})
# The pad's last-dim limit of gradOutput, exclusive, per dtype (the aclnn page; its README
# says 16384 / 24576: docs/targets.md, "Conflicts").
PAD_WIDTH_LIMITS = {"float16": 16362, "bfloat16": 16362, "float32": 24544}


class OpSupport(NamedTuple):
    """What a product does with one op."""

    dtypes: frozenset[str] | None        # None: every dtype padloss takes (the spec target)
    numerics: str                        # the kernel's numerics model (Problem.numerics)
    width_limits: dict[str, int] | None  # the pad's limit of grad_output's last dim, per dtype
    # what of a call (the op's facts: padloss.op's target_terms) padloss does not model yet
    unmodelled: Callable[[dict], str | None] | None = None


# Ascend 950's kernel is the SIMT one (pad_v3_grad_circular_simt.h) where padloss models it:
# pads of one sign (its tiling takes a SIMD path for large, wide inputs with positive pads,
# pad_v3_grad_circular_huge_width.h, and negative pads are not read yet).
ARCH35_SIMT_ELEMENTS = 48 * 1024      # its tiling's SIMT_BRANCH_SIZE: inputs this small are SIMT
ARCH35_SIMT_WIDTH = 8192              # narrower rows fit its 64 KiB buffers whatever the UB size


def _arch35_unmodelled(facts: dict) -> str | None:
    if min(facts["pads"]) < 0:
        return "negative pads on its kernel"
    if facts["elements"] > ARCH35_SIMT_ELEMENTS and facts["self_width"] > ARCH35_SIMT_WIDTH:
        return (f"its kernel's path for wide rows (self's width past {ARCH35_SIMT_WIDTH}, more than "
                f"{ARCH35_SIMT_ELEMENTS} elements of grad_output)")
    return None


class Target(NamedTuple):
    name: str
    product: str                         # as CANN's product tables call it
    socs: tuple[str, ...]                # the SoC names' prefixes (torch_npu's device names)
    ops: dict[str, OpSupport | None]     # None: CANN does not run the op on this product

    def supports(self, op: str) -> bool:
        return self.ops.get(op) is not None


# CANN's L1 op_api casts every input to P (as docs/ does: integers rounded once), runs the
# kernel into P and casts that to the output's dtype: the "op-api" model (padloss.reference).
_L1_OP_API = "op-api"
_A2_A3 = {PAD: OpSupport(NPU, "spec", PAD_WIDTH_LIMITS), L1: OpSupport(NPU, _L1_OP_API, None)}
_NO_PAD_L1_HALF = {PAD: None, L1: OpSupport(HALF_AND_SINGLE, _L1_OP_API, None)}

TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("spec", "padloss's contract (docs/): no product's limits, float64 and integer extensions",
           (), {PAD: OpSupport(None, "spec", None), L1: OpSupport(None, "spec", None)}),
    Target("atlas-a2", "Atlas A2 training / inference products", ("Ascend910B",), _A2_A3),
    Target("atlas-a3", "Atlas A3 training / inference series", ("Ascend910_93", "Ascend910C"), _A2_A3),
    Target("atlas-training", "Atlas training series", ("Ascend910A", "Ascend910ProA", "Ascend910ProB",
                                                        "Ascend910PremiumA"), _NO_PAD_L1_HALF),
    Target("atlas-inference", "Atlas inference series", ("Ascend310P",), _NO_PAD_L1_HALF),
    Target("atlas-200i-500-a2", "Atlas 200I/500 A2 inference products", ("Ascend310B",),
           {PAD: None, L1: None}),
    Target("ascend-950", "Ascend 950PR / Ascend 950DT", ("Ascend950", "Ascend910_95"),
           {PAD: OpSupport(NPU, "arch35-simt", PAD_WIDTH_LIMITS, _arch35_unmodelled),
            L1: OpSupport(NPU, _L1_OP_API, None)}),
)}
DEFAULT = "spec"
# The status CANN returns where a product has no kernel for the op, or its tiling refuses
# the shape: the op_api's check of the kernel's result (CHECK_RET(... != nullptr,
# ACLNN_ERR_INNER_NULLPTR)); unverified on hardware.
NO_KERNEL = Status.INNER_NULLPTR


def targets() -> list[Target]:
    """Every target padloss knows, the default first."""
    return list(TARGETS.values())


ARGUMENT = "npu_target"   # the ops' keyword (L1's ``target`` is aclnn's label)


def resolve(op: str, name: Any) -> Target:
    """The Target called ``name`` (the call's ``npu_target=``, or the setting when None)."""
    given = name is not None
    if not given:
        from .config import current

        name = current.target
    target = TARGETS.get(name) if isinstance(name, str) else None
    if target is None:
        where = f"argument '{ARGUMENT}'" if given else "the target setting (PADLOSS_TARGET)"
        raise InvalidArgumentError(f"{op}: {where}: {name!r} is not a target; known: "
                                   f"{', '.join(TARGETS)} (padloss.targets(), docs/targets.md)",
                                   argument=ARGUMENT)
    return target


def for_soc(soc: str) -> Target | None:
    """The target of a SoC, by torch_npu's name for it ("Ascend910B3": atlas-a2); None
    for one no target lists."""
    for target in TARGETS.values():
        if any(soc.startswith(prefix) for prefix in target.socs):
            return target
    return None


def for_call(op: str, name: Any, device: str) -> Target:
    """The target a call on ``device`` runs under: ``name``'s (the call's npu_target, else
    the setting), except on an Ascend device, which is its own target: ``spec`` there
    means the device's, and any other name must be the device's."""
    target = resolve(op, name)
    soc = _device_soc(device)
    device_target = for_soc(soc) if soc is not None else None
    if device_target is None or target is device_target:
        return target
    if target.name == DEFAULT:
        return device_target
    refusal = InvalidArgumentError(f"{op}: argument '{ARGUMENT}': target {target.name!r} is not the "
                                   f"device's: {device} is an {soc}, target {device_target.name!r}",
                                   argument=ARGUMENT)
    refusal.target = target.name
    raise refusal


def _device_soc(device: str) -> str | None:
    """The SoC of ``device``, as the available backend that computes there reports it."""
    if device == "cpu":
        return None
    from .dispatch import registry

    kind = device.partition(":")[0]
    for backend in registry.by_priority():
        if kind in backend.devices and backend.availability()[0]:
            soc = backend.device_soc(device)
            if soc is not None:
                return soc
    return None


def check(target: Target, op: str, dtypes: tuple[tuple[str, str], ...], facts: dict) -> None:
    """The target's refusals of a call the op's own rules accepted: the op on this
    product; each (argument, dtype) of ``dtypes`` (self's for the pad; L1's promoted
    dtype, named self, and its output's); ``facts`` of the call (the pad's "width",
    grad_output's last dim, and what OpSupport.unmodelled reads). The error's ``target``
    is its name."""
    if target.name == DEFAULT:
        return
    refusal = _refusal(target, op, dtypes, facts)
    if refusal is not None:
        refusal.target = target.name
        raise refusal


def _refusal(target: Target, op: str, dtypes: tuple[tuple[str, str], ...],
             facts: dict) -> PadlossError | None:
    support = target.ops.get(op)
    where = f"target {target.name!r} ({target.product})"
    if support is None:
        return PadlossError(f"{op}: argument '{ARGUMENT}': {where} does not run this op (CANN's "
                            f"product table; docs/targets.md)", argument=ARGUMENT, status=NO_KERNEL)
    for argument, dtype in dtypes:
        if support.dtypes is not None and dtype not in support.dtypes:
            return InvalidArgumentError(f"{op}: argument '{argument}': dtype {dtype} is not one {where} "
                                        f"takes ({', '.join(sorted(support.dtypes))})", argument=argument)
    first, width = dtypes[0][1], facts.get("width")
    limit = support.width_limits.get(first) if support.width_limits and width is not None else None
    if limit is not None and not 0 < width < limit:
        return PadlossError(f"{op}: argument 'grad_output': its last dim {width} is past what {where} "
                            f"runs: (0, {limit}) for {first}", argument="grad_output", status=NO_KERNEL)
    what = support.unmodelled(facts) if support.unmodelled is not None else None
    if what is not None:
        return BackendError(f"{op}: argument '{ARGUMENT}': padloss does not model {what} on {where} "
                            f"yet (docs/targets.md)", argument=ARGUMENT)
    return None
