"""Run as a script (``python .../first_result.py``), never imported: prints the seconds
from ``import padloss`` to the tiny pad's result, NumPy imported first. A module run
with ``-m`` would import padloss before the clock starts."""
import sys

sys.path.pop(0)   # this folder, which Python put first: its modules are no top-level ones

import time  # noqa: E402

import numpy as np  # noqa: E402

t0 = time.perf_counter()
import padloss  # noqa: E402

padloss.circular_pad2d_backward(np.ones((2, 3, 14, 14), np.float32), np.empty((2, 3, 8, 8), np.float32),
                                (3, 3, 3, 3))
print(time.perf_counter() - t0)

from padloss.quick_exit import quick_exit  # noqa: E402

quick_exit()   # the parent waits for this process's end: no teardown
