"""Both ops x dtype x size x implementation (each padloss backend, and PyTorch
CPU autograd as a peer): time, peak memory, and (from medium up) the
bandwidth ratio to a streaming ceiling of the same read/write mix, timed in
interleaved rounds in the same process.

Implementations that cannot run here (backend unavailable, torch not
installed, op missing in this commit) are skipped in setup.
"""
from .common import DTYPES, IMPLS, SIZES, Workload, ratio_to_ceiling


class _OpBenchmark:
    op: str
    reduction: str | None = None
    params = [list(SIZES), DTYPES, IMPLS]
    param_names = ["size", "dtype", "impl"]
    timeout = 300

    def setup(self, size, dtype, impl):
        self.workload = Workload(self.op, self.reduction, size, dtype)
        self.call = self.workload.call(impl)   # the JIT warm-up: compiled or loaded here

    def time_call(self, size, dtype, impl):
        self.call()

    def peakmem_call(self, size, dtype, impl):
        self.call()

    def track_ceiling_ratio(self, size, dtype, impl):
        """Bandwidth / the best normal-store ceiling's, per round (a copy for the pad; 2 or 3 reads
        + 1 write for L1)."""
        from asv_runner.benchmarks.mark import SkipNotImplemented

        if size == "tiny":   # a few microseconds of call overhead: time_call is the measure
            raise SkipNotImplemented("tiny calls are latency-bound")
        ceiling = self.workload.ceiling()
        if ceiling is None:
            raise SkipNotImplemented("this commit has no streaming ceiling kernel")
        return ratio_to_ceiling(self.call, self.workload.nbytes, ceiling)

    track_ceiling_ratio.unit = "ratio"


class CircularPad2dBackward(_OpBenchmark):
    op = "circular_pad2d_backward"


class L1LossBackwardMean(_OpBenchmark):
    op, reduction = "l1_loss_backward", "mean"


class L1LossBackwardNone(_OpBenchmark):
    op, reduction = "l1_loss_backward", "none"
