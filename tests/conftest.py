import os
import sys

import pytest
from hypothesis import settings

# The backends/ source root holds padloss_numba; an installed padloss has it on sys.path
# already, a bare checkout (PYTHONPATH=.) does not.
_backends = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "backends")
if _backends not in sys.path:
    sys.path.insert(0, _backends)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

settings.register_profile("ci", deadline=None, print_blob=True, derandomize=True)
settings.register_profile("dev", deadline=None, print_blob=True)
# random draws from --hypothesis-seed, no example database: .ci/run's second pass over the
# tests that compare with torch, reproducible from its seed alone
settings.register_profile("seeded", deadline=None, print_blob=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def streamed(monkeypatch):
    """Every parallel L1 plan streams its output past the caches however small it is
    (the size threshold is about speed, not results); plans are built afresh."""
    import padloss
    from padloss_numba import nontemporal

    monkeypatch.setattr(nontemporal, "STREAM_MIN_BYTES", 0)
    padloss.plan_cache.clear()
    yield
    padloss.plan_cache.clear()
