"""The aclnn status codes and the one exception type that carries them.

Every failure a user can cause is raised in phase 1 (validation and planning),
before any output is written, as a :class:`PadlossError` whose ``status`` is the
code the Ascend library would return for the same call.
"""
from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """aclnn status codes (CANN ``aclnnStatus``); the numbers are part of the contract."""

    SUCCESS = 0
    PARAM_NULLPTR = 161001
    PARAM_INVALID = 161002
    RUNTIME_ERROR = 361001
    INNER_NULLPTR = 561103


class PadlossError(Exception):
    """A call padloss refused or could not run; ``status`` is the aclnn code.

    ``argument`` names the offending argument when there is one, so callers can
    react programmatically without parsing the message; ``target`` names the target
    (padloss.targets()) whose product refused the call, when a product's rule did.
    """

    status: Status = Status.RUNTIME_ERROR
    target: str | None = None

    def __init__(self, message: str, *, argument: str | None = None, status: Status | None = None):
        # BaseException.__new__ has stored the message in args already; not calling
        # Exception.__init__ keeps this traceable by torch.compile, which then names
        # the error (rather than its constructor) when a compiled forward refuses a call.
        self.argument = argument
        if status is not None:
            self.status = Status(status)


class NullArgumentError(PadlossError, TypeError):
    """A required argument is missing (``PARAM_NULLPTR``)."""

    status = Status.PARAM_NULLPTR


class InvalidArgumentError(PadlossError, ValueError):
    """An argument breaks a rule of the op's contract (``PARAM_INVALID``)."""

    status = Status.PARAM_INVALID


class BackendError(PadlossError, RuntimeError):
    """The chosen backend is unavailable or failed at run time (``RUNTIME_ERROR``)."""

    status = Status.RUNTIME_ERROR


def null_argument(op: str, argument: str) -> NullArgumentError:
    return NullArgumentError(f"{op}: argument '{argument}' is required and must not be None",
                             argument=argument)


def invalid_argument(op: str, argument: str, rule: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{op}: argument '{argument}': {rule}", argument=argument)
