"""The op-definition skeleton: phase 1 and the one-shot call, written once for both ops.

An op module (padloss.circular_pad, padloss.l1_loss) fills in an
:class:`OpDefinition` with only what differs between ops:

- ``buffers``: the names of the buffers the kernel touches, in aclnn order,
  the output last (an executor's ``run()`` takes new ones by these names);
- ``roles``: what the one-shot lane compares of each argument the validator takes
  (padloss.fastpath.Lane: a buffer's metadata, an untouched array's shape and dtype, a
  parameter's identity or value); the ``BUFFER`` ones are the input buffers, in order;
- ``memo_params(*args)``: the op's parameters as a memo-key part, None where they are
  not known exactly (padloss.fastpath explains the memo and the fast path);
- ``validate_inputs(*args)``: every rule on the arguments other than the
  output; returns :class:`Inputs` (the input buffers adapted, the shape and
  dtype an output gets, the Problem's params, the template of a new output);
- ``validate_output(meta, inputs, name)``: the op's rules on the output's
  dtype and shape (the rules shared by every op, a writable output on the
  inputs' device that overlaps none of them, are checked here);
- ``target_terms(inputs, output_meta)``: what a target's refusals read
  (padloss.npu_targets.check): the dtypes it checks, by argument, the pad's width,
  whether an input is an integer;
- ``adapt(*input_buffers)``, where an op has one: the first argument, when it is no
  ndarray, as the array the one-shot call stands for (L1's scalar grad_output).

Its public one-shot function is :meth:`OpDefinition.one_shot_function` of a def that
gives its signature and docstring (padloss.fastpath.Lane writes its body); the other
public functions pass their arguments through: ``args`` as the validator takes them (the
input buffers as the caller gave them and the memo params are read from them), and
``target``, the call's ``npu_target=`` (None: the setting), checked once the op's own
rules passed; the memo keys on its name.

The output's name in errors is ``grad_input`` in the two-phase form and
``out`` in the one-shot call. All checks run before a backend is asked for
anything, so an invalid call raises with nothing written.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from . import npu_targets
from .aliasing import check_output_overlap
from .arrays import Tensor, TensorMeta, as_tensor, empty_like_output
from .errors import invalid_argument, null_argument
from .executor import Executor, make_executor
from .fastpath import BUFFER, Ints, Known, Lane, Prepared, ValidatedCalls, as_tensors, run_once
from .problem import Problem


class Inputs(NamedTuple):
    """What an op's validate_inputs returns: the checked inputs."""

    tensors: tuple[Tensor, ...]   # the input buffers, adapted, in aclnn order
    shape: tuple[int, ...]        # the output's shape
    dtype: str                    # the dtype of an output the call allocates
    params: tuple                 # Problem.params
    template: Tensor              # a new output is of its kind and on its device


class OpDefinition:
    """One op's phase 1 and one-shot call, from its validators (see the module)."""

    __slots__ = ("op", "buffers", "inputs", "one_shot_names", "validate_inputs", "validate_output",
                 "target_terms", "given", "allocating", "lane", "_roles", "_adapt", "_input_at",
                 "_memo_params")

    def __init__(self, op: str, buffers: tuple[str, ...], roles: tuple[str | Ints, ...],
                 memo_params: Callable[..., Any],
                 validate_inputs: Callable[..., Inputs],
                 validate_output: Callable[[TensorMeta, Inputs, str], None],
                 target_terms: Callable[[Inputs, TensorMeta], tuple],
                 adapt: Callable[..., Any] | None = None):
        self.op = op
        self.buffers = buffers
        self.inputs = buffers[:-1]
        self.one_shot_names = self.inputs + ("out",)
        self.validate_inputs = validate_inputs
        self.validate_output = validate_output
        self.target_terms = target_terms
        self.given = ValidatedCalls(op, len(buffers))            # calls given their output
        self.allocating = ValidatedCalls(op, len(self.inputs))   # calls that allocate it
        self.lane = None   # the one-shot function's (one_shot_function)
        self._roles = roles
        self._adapt = adapt
        self._input_at = tuple(i for i, role in enumerate(roles) if role == BUFFER)   # input buffers
        self._memo_params = memo_params

    def one_shot_function(self, public: Callable) -> Callable:
        """Decorator: the op's public one-shot function, with the signature and the docstring
        of ``public`` (the op's parameters, then keyword-only ``out``, ``backend`` and
        ``npu_target``) and the body padloss.fastpath.Lane writes (``public``'s own is
        never run): one Python frame before a repeated call's kernel (docs/performance.md,
        "Tiny calls and autograd")."""
        self.lane = Lane(public, self._roles, self.call, self._memo_params, self._adapt)
        return self.lane.one_shot

    def _inputs_and_params(self, args: tuple) -> tuple[tuple, Any]:
        """The input buffers among ``args`` (by their roles) and the memo params of ``args``."""
        return tuple(args[i] for i in self._input_at), self._memo_params(*args)

    def get_workspace_size(self, args: tuple, grad_input: Any, backend: str | None,
                           target: str | None) -> tuple[int, Executor]:
        """The two-phase form's phase 1: (workspace bytes, executor)."""
        executor = self.plan(args, grad_input, "grad_input", backend, target)
        return executor.workspace_size, executor

    def plan(self, args: tuple, output: Any, name: str, backend: str | None, target: str | None) -> Executor:
        """Phase 1 for a given output (``name`` as the caller called it)."""
        inputs, params = self._inputs_and_params(args)
        buffers = inputs + (output,)
        known = self.given.find(buffers, params, target)
        if known is not None:
            self.given.check_buffers(known, buffers, self.inputs + (name,))
            return make_executor(known.problem, self.buffers, as_tensors(known.problem, buffers), backend)
        key = self.given.key(buffers, params, target)
        return self._planned(self.validate_inputs(*args), output, name, key, backend, target)

    def _planned(self, checked: Inputs, output: Any, name: str, key: tuple | None,
                 backend: str | None, target: str | None) -> Executor:
        """The rest of phase 1 once the inputs passed: the output's rules, the
        Problem, the plan; the verdict is remembered under ``key``."""
        op = self.op
        if output is None:
            raise null_argument(op, name)
        gi = as_tensor(op, name, output, writable=True)
        self.validate_output(gi.meta, checked, name)
        go = checked.tensors[0]
        if gi.device != go.device:
            raise invalid_argument(op, name, f"is on {gi.device} but {self.inputs[0]} is on {go.device}")
        tensors = checked.tensors + (gi,)
        check_output_overlap(op, self.inputs + (name,), tensors)
        on = npu_targets.for_call(op, target, gi.device)   # the device's, on an Ascend NPU
        npu_targets.check(on, op, *self.target_terms(checked, gi.meta))
        metas = tuple([t.meta for t in tensors])
        problem = Problem(op, gi.device, metas, checked.params, on.ops[op].numerics)
        executor = make_executor(problem, self.buffers, tensors, backend)
        self.given.remember(key, problem)
        return executor

    def _allocating(self, args: tuple, inputs: tuple, params: Any, key: tuple | None,
                    backend: str | None, target: str | None) -> tuple[Known, Executor]:
        """An allocating call validated and planned on a new output (not run yet), and
        remembered under ``key``."""
        checked = self.validate_inputs(*args)
        out = empty_like_output(checked.template, checked.shape, checked.dtype)
        given_key = self.given.key(inputs + (out,), params, target)
        executor = self._planned(checked, out, "out", given_key, backend, target)
        return self.allocating.remember(key, executor.problem), executor

    def prepare(self, args: tuple) -> Prepared:
        """An allocating call on the NumPy input buffers of ``args`` validated and planned
        ahead (under the target setting), not run: the Prepared runs it later on a new first
        input (padloss.torch plans a backward in its forward, before the gradient exists)."""
        inputs, params = self._inputs_and_params(args)
        known = self.allocating.find(inputs, params, None)
        if known is None:
            key = self.allocating.key(inputs, params, None)
            known = self._allocating(args, inputs, params, key, None, None)[0]
        return Prepared(known, inputs)

    def call(self, args: tuple, inputs: tuple, params: Any, out: Any, backend: str | None,
             target: str | None) -> Any:
        """The one-shot call the long way (``one_shot`` goes here unless it repeats the last
        call of its form): ``out`` written in place, or a new output; returned."""
        if out is None:
            form, before = self.lane.allocating, self.allocating.last[-1]   # the last signature found
            known = self.allocating.find(inputs, params, target)
            if known is None:
                key = self.allocating.key(inputs, params, target)
                return self._allocating(args, inputs, params, key, backend, target)[1].run()
            buffers = inputs + (known.new_output(),)
        else:
            buffers = inputs + (out,)
            form, before = self.lane.given, self.given.last[-1]
            known = self.given.find(buffers, params, target)
            if known is None:
                key = self.given.key(buffers, params, target)
                return self._planned(self.validate_inputs(*args), out, "out", key, backend, target).run()
            self.given.check_buffers(known, buffers, self.one_shot_names)
        run_once(known, buffers, backend)
        self.lane.ran(form, known, before, args, out, target)
        return buffers[-1]
