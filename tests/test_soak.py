"""A small slice of tests/soak.py, the soak and the fuzz that run at scale by hand."""
from __future__ import annotations

import json
import os
import subprocess
import sys

SOAK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "soak.py")


def run_soak(*args) -> dict:
    proc = subprocess.run([sys.executable, SOAK, *args], capture_output=True, text=True, timeout=900)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, (report, proc.stderr[-3000:])
    return report


def test_threads_on_an_evicting_plan_cache_stay_bit_exact():
    report = run_soak("soak", "--threads", "16", "--calls", "16000", "--plans", "8")
    assert report["calls"] == 16000 and report["wrong"] == report["errors"] == 0
    assert report["plan_cache_misses"] > report["distinct_calls"]     # it evicted, and planned again


def test_malformed_arguments_are_refused_and_write_nothing():
    report = run_soak("fuzz", "--examples", "400")
    assert report["examples"] == 400 and report["bad"] == 0 and report["refused"] > 300
