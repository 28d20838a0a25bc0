"""A test-only third-party backend, discovered through the padloss.backends entry point.

It delegates the computation to the numba backend and records each Problem it
was asked to compile, so tests can tell which backend ran a call.
"""
from padloss import Backend

compiled = []


class RecordingBackend(Backend):
    name = "recording"
    priority = -10                    # never wins automatic selection over numba
    devices = frozenset({"cpu"})

    def supports(self, problem):
        return None

    def compile(self, problem):
        import numba
        from padloss_numba.numba_backend import COMPILERS

        compiled.append(problem)
        return COMPILERS[problem.op](problem, numba.get_num_threads())

    def cache_context(self):
        import numba

        return (numba.get_num_threads(),)


def broken():
    raise RuntimeError("this plugin is broken on purpose")
