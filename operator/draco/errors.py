"""One exception tree for the whole package.

Callers catch the branch they can act on; a user-facing message names the object, the
field and what to do about it. The tree::

    DracoError
    ├── InvalidObjectError          an object breaks the API's rules (carries field errors)
    ├── CELError                    a CEL selector cannot be used
    │   ├── CELCompileError         it does not compile or does not type-check
    │   ├── CELCostError            it is too expensive (estimated or at run time)
    │   └── CELRuntimeError         it failed on a device (missing key, type error)
    ├── AllocationError             the allocator could not answer "here are devices"
    │   ├── UnsatisfiableError      nothing fits (an explanation says why)
    │   ├── AllocationInputError    the inputs are wrong: fatal, retrying does not help
    │   └── AllocationTimeoutError  the search budget ran out: not the same as "does not fit"
    │       └── AllocationInterruptedError  the caller stopped the work (its wall-clock budget)
    ├── ControlPlaneError           the local test/demo control plane failed to start
    └── AgentError                  the node agent failed to publish or prepare
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "AgentError",
    "AllocationError",
    "AllocationInputError",
    "AllocationInterruptedError",
    "AllocationTimeoutError",
    "CELCompileError",
    "CELCostError",
    "CELError",
    "CELRuntimeError",
    "ControlPlaneError",
    "DracoError",
    "FieldError",
    "InvalidObjectError",
    "UnsatisfiableError",
]


class DracoError(Exception):
    """The base of every error draco raises on purpose."""


@dataclass(frozen=True)
class FieldError:
    """One broken rule: where (`spec.devices.requests[0].name`), what kind, and why.

    `type` follows the API server's vocabulary (Required, Invalid, TooLong, TooMany,
    Duplicate, NotSupported, Forbidden, Internal) so messages read like kubectl's.
    """

    path: str
    type: str
    detail: str
    value: object = None

    def __str__(self) -> str:
        return f"{self.path}: {self.type}: {self.detail}" if self.path else f"{self.type}: {self.detail}"


class InvalidObjectError(DracoError):
    """An object breaks the API's rules; `errors` lists every broken rule."""

    def __init__(self, message: str, *, errors: Sequence[FieldError] = ()) -> None:
        self.errors = list(errors)
        super().__init__(message if not self.errors else f"{message}: " + "; ".join(map(str, self.errors)))


class CELError(DracoError):
    """A CEL selector cannot be used."""


class CELCompileError(CELError):
    """The expression does not parse or does not type-check."""


class CELCostError(CELError):
    """The expression is too expensive: rejected at compile time or aborted at run time."""


class CELRuntimeError(CELError):
    """The expression failed on one device (a missing key is an error, not `false`)."""


class AllocationError(DracoError):
    """The allocator could not hand out devices."""


class UnsatisfiableError(AllocationError):
    """The claims do not fit; the message is the allocator's explanation."""


class AllocationInputError(AllocationError):
    """The inputs are wrong (unknown class, broken selector, too many devices): retrying the
    same inputs gives the same answer."""


class AllocationTimeoutError(AllocationError):
    """The search budget ran out before the search was decided. Not "does not fit"."""


class AllocationInterruptedError(AllocationTimeoutError):
    """The caller asked the work to stop (the operator's wall-clock budget per allocation
    attempt ran out). The pure layers never decide this themselves: they only poll the
    caller's interrupt, so equal inputs still give equal answers when nobody interrupts."""


class ControlPlaneError(DracoError):
    """The local control plane (etcd + kube-apiserver) could not be built or started."""


class AgentError(DracoError):
    """The node agent could not publish devices or prepare them."""
