"""A test-only third-party backend, discovered through the padloss.backends entry point.

It delegates the computation to the numba backend and records each Problem it
was asked to compile and each run, so tests can tell which backend ran a call.
Its plans have no ``bind`` hook: they take the native buffers on every run.
"""
from padloss import Backend

compiled = []
runs = []


class RecordedPlan:
    def __init__(self, plan):
        self._plan = plan
        self.workspace_size = plan.workspace_size

    def run(self, buffers, workspace, stream):
        runs.append(self)
        bind = getattr(self._plan, "bind", None)
        self._plan.run(buffers if bind is None else bind(buffers), workspace, stream)


class RecordingBackend(Backend):
    name = "recording"
    priority = -10                    # never wins automatic selection over numba
    devices = frozenset({"cpu"})

    def supports(self, problem):
        return None

    def compile(self, problem):
        import numba

        from padloss_numba import backend

        compiled.append(problem)
        return RecordedPlan(backend.plan_builder(problem.op)(problem, numba.get_num_threads()))

    def cache_context(self):
        import numba

        return (numba.get_num_threads(),)


def broken():
    raise RuntimeError("this plugin is broken on purpose")
