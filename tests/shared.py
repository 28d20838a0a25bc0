"""Test helpers used by several test modules: a strategy for one circularly padded
axis, the example count of the tests that compare with another library, and running a
script at several Numba thread counts."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import strategies as st

from padloss.geometry import axis_rule_violation


@st.composite
def pad_axis(draw, max_size=9):
    """(size, pad_before, pad_after) for one axis, negative (cropping) pads included."""
    size = draw(st.integers(1, max_size))
    valid = [(a, b) for a in range(-size, size) for b in range(-size, size)
             if axis_rule_violation(size, a, b) is None]
    before, after = draw(st.sampled_from(valid))
    return size, before, after


def peer_examples(n: int) -> int:
    """Examples for a property test marked ``vs_peer`` (it compares with torch or JAX
    within a rounding bound): ``n``, or PADLOSS_PEER_EXAMPLES where that is more, so that
    .ci/run's second, seeded pass draws widely enough for a bound that is too tight to show."""
    return max(n, int(os.environ.get("PADLOSS_PEER_EXAMPLES", "0")))


def json_at_thread_counts(script: str, counts=(1, 2)) -> dict[int, dict]:
    """Run ``script`` (which prints one JSON object with a "threads" key) in a fresh
    process per NUMBA_NUM_THREADS value; check each ran at its count."""
    runs = {}
    for n in counts:
        env = dict(os.environ, NUMBA_NUM_THREADS=str(n))
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                              check=True)
        runs[n] = json.loads(proc.stdout)
        assert runs[n]["threads"] == n
    return runs


def assert_refused(fn, args: dict, status, argument: str, words: str) -> None:
    """``fn(**args)`` raises a PadlossError with the aclnn ``status``, naming
    ``argument`` and the rule (``words``) in its message, and leaves ``args["out"]``
    exactly as it was."""
    import numpy as np
    import pytest

    import padloss

    out = args["out"]
    before = out.copy() if isinstance(out, np.ndarray) else None
    with pytest.raises(padloss.PadlossError) as info:
        fn(**args)
    err = info.value
    assert err.status == status
    assert err.argument == argument
    message = str(err)
    assert message.startswith(f"{fn.__name__}: argument")
    assert f"'{argument}'" in message and words in message
    if before is not None:
        np.testing.assert_array_equal(out, before)
