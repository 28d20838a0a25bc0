"""Kernel bodies compiled knowing that their array arguments do not overlap.

LLVM cannot tell that an output row and the input rows it reads live in
different buffers, so before each loop it vectorises it checks at run time
whether their ranges overlap and keeps a second, scalar copy of the loop for
when they do. A pad row runs several short loops (its wrapped runs, its
fills), and each paid that check and the registers it held (the float16 pad
body: 3439 instructions, 2510 with ``noalias``). Serial, medium, interleaved
rounds: bfloat16 1.15-1.25x faster, float32 1.1-1.15x, float64 1.08-1.18x,
float16 1.05-1.2x at the median; the large float16 pad 1.07x. One loss: the
fastest rounds of float16 rows with pad-3 or pad-7 wraps, 1.13-1.23x slower
(host and Haswell), because LLVM now merges each scalar float16 load
(``vpinsrw``) into the previous element's register, a serial chain. L1's
bodies, long loops with one check a block, ran the same.

The ops guarantee what LLVM's ``noalias`` attribute promises: the output never
shares memory with an input (padloss.aliasing, every checker), a workspace
never with either (padloss.executor), and plan-owned arrays (axes, the L1
loop nest) with nothing. Inputs may overlap one another (L1's self and target
can be one array): ``noalias`` only constrains memory written through them.

Numba has the switch (``Flags.noalias``, which puts the attribute on every
pointer argument) but no decorator option for it, so :class:`NoAliasCompiler`,
a custom pipeline class (Numba's documented way to change how one function
compiles), sets it. test_engine fails loudly if the attribute stops appearing.
"""
from __future__ import annotations

from numba.core.compiler import Compiler


class NoAliasCompiler(Compiler):
    """Numba's default pipelines, with the array arguments marked ``noalias``."""

    def define_pipelines(self):
        self.state.flags.noalias = True
        return super().define_pipelines()
