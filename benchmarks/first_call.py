"""The first result in a fresh interpreter, compile cache warm: ``import
padloss`` plus one small call (numpy is imported in the untimed setup)."""
import subprocess
import sys

import padloss

CALLS = {
    "circular_pad2d_backward": "padloss.circular_pad2d_backward(np.ones((2, 3, 14, 14), np.float32), "
                               "np.empty((2, 3, 8, 8), np.float32), (3, 3, 3, 3))",
    "l1_loss_backward": "padloss.l1_loss_backward(np.ones((), np.float32), "
                        "np.ones((2, 3, 8, 8), np.float32), np.zeros((2, 3, 8, 8), np.float32), 'mean')",
}


class FirstCall:
    params = [list(CALLS)]
    param_names = ["op"]
    timeout = 120

    def setup(self, op):
        if not hasattr(padloss, op):
            raise NotImplementedError(f"this commit has no padloss.{op}")
        # warm the compile cache, so that the timed runs measure loading, not compiling
        subprocess.run([sys.executable, "-c", f"import numpy as np, padloss; {CALLS[op]}"], check=True)

    def timeraw_import_and_call(self, op):
        return f"import padloss\n{CALLS[op]}", "import numpy as np"
