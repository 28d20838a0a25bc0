"""``python -m padloss``: the command line (see padloss.cli)."""
from .cli import run

run()
