"""padloss.quick_exit: the end of padloss's own processes, exit handlers run, output kept."""
import atexit
import os
import subprocess
import sys

from padloss import config, quick_exit

BUFFERED = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
"""The environment without PYTHONUNBUFFERED: a child's stdout into a pipe is block-buffered."""

ENDS_QUICKLY = """
import atexit, sys
from padloss.quick_exit import quick_exit
atexit.register(lambda: print("handler ran"))
sys.stdout.write("unflushed, ")
sys.stderr.write("err unflushed")
quick_exit({status})
print("never reached")
"""


def test_cpython_still_lets_the_exit_handlers_run_early():
    # quick_exit falls back on a plain exit without it: this says the speed is lost
    assert quick_exit._run_exit_handlers is atexit._run_exitfuncs


def test_the_status_the_handlers_and_the_buffered_output_survive():
    for status, code in ((3, 3), (None, 0), (0, 0)):
        done = subprocess.run([sys.executable, "-c", ENDS_QUICKLY.format(status=status)],
                              capture_output=True, text=True, env=BUFFERED)
        assert done.returncode == code
        assert done.stdout == "unflushed, handler ran\n"
        assert done.stderr == "err unflushed"


def test_the_command_line_s_output_reaches_a_pipe_whole():
    # its last lines are the flush's (a nonzero status through quick_exit: test_disk_cache's
    # `padloss cache verify` on a damaged cache)
    done = subprocess.run([sys.executable, "-m", "padloss", "info"], capture_output=True, text=True,
                          env=BUFFERED)
    last = [line.split()[-1] for line in done.stdout.splitlines()[-len(config.SETTINGS):]]
    assert done.returncode == 0 and last == [s.variable for s in config.SETTINGS]   # info ends so
