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
    ├── PodClaimsError              (an InvalidObjectError) the pod's claims annotation is unusable
    ├── ClaimNotCreatedError        a pod's template claim is not generated yet
    ├── KubeError                   the API server refused a request (status, reason)
    │   ├── NotFoundError           404: the object (or its namespace) does not exist
    │   ├── ConflictError           409: stale resourceVersion (also a RetryableError)
    │   ├── AlreadyExistsError      409 AlreadyExists on create
    │   └── APIUnavailableError     no answer (connection refused or reset) or 429/503/504:
    │                               the server is down or not ready (also a RetryableError)
    ├── CredentialsError            no kubeconfig and no in-cluster service account
    ├── NamespaceLookupError        a namespace's labels could not be read (admission)
    ├── ControlPlaneError           the local test/demo control plane failed to start
    └── AgentError                  the node agent failed to publish or prepare
        ├── DeviceConfigError       a claim's opaque configuration is not valid for its driver
        └── NriError                the runtime's NRI connection failed or spoke wrongly

    RetryableError                  a transient failure of a work-queue sync: retried with
    │                               backoff, logged without a traceback (a mix-in: not a
    │                               DracoError by itself)
    └── ClaimCreationError          a generated claim cannot be created yet
    QueueShutDown                   a work queue was shut down while a worker waited

The CEL selector errors (`SelectorRuntimeError`, `SelectorCostError`) are CELRuntimeError
subclasses that carry the expression and device; `SemVerError` (a DracoError and a
ValueError) is what parsing a semantic version raises. Signals that never leave their
module (the allocator's `SearchExhausted`, the CEL evaluator's `EvalError` and
`CostLimitExceeded`) stay private to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "APIUnavailableError",
    "AgentError",
    "AllocationError",
    "AllocationInputError",
    "AllocationInterruptedError",
    "AllocationTimeoutError",
    "AlreadyExistsError",
    "CELCompileError",
    "CELCostError",
    "CELError",
    "CELRuntimeError",
    "ClaimCreationError",
    "ClaimNotCreatedError",
    "ConflictError",
    "ControlPlaneError",
    "CredentialsError",
    "DeviceConfigError",
    "DracoError",
    "FieldError",
    "InvalidObjectError",
    "KubeError",
    "NamespaceLookupError",
    "NotFoundError",
    "NriError",
    "PodClaimsError",
    "QueueShutDown",
    "RetryableError",
    "SelectorCostError",
    "SelectorRuntimeError",
    "SemVerError",
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


class SelectorRuntimeError(CELRuntimeError):
    """A selector failed on a device; says which selector, which device and why."""

    def __init__(self, message: str, *, expression: str, device: str, context: str, detail: str) -> None:
        super().__init__(message)
        self.expression = expression
        self.device = device
        self.context = context
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only fields: pickle (results crossing to another process) needs help.
        return (
            _restore_runtime_error,
            (type(self), str(self), self.expression, self.device, self.context, self.detail),
        )


def _restore_runtime_error(
    cls: type[SelectorRuntimeError], message: str, expression: str, device: str, context: str, detail: str
) -> SelectorRuntimeError:
    return cls(message, expression=expression, device=device, context=context, detail=detail)


class SelectorCostError(SelectorRuntimeError, CELCostError):
    """A selector ran past the runtime cost limit on a device."""


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


class PodClaimsError(InvalidObjectError):
    """The pod's `resource.draco.dev/claims` annotation cannot be used as written."""


class ClaimNotCreatedError(DracoError):
    """A template claim of the pod has no generated claim yet (the lifecycle creates it)."""


class NamespaceLookupError(DracoError):
    """The namespace could not be read, so admin access cannot be verified."""


class RetryableError(Exception):
    """An expected, transient failure of a sync (a conflict, a missing template): logged
    without a traceback and retried with backoff."""


class QueueShutDown(Exception):
    """`get()` was called (or was waiting) on a queue that has been shut down."""


class ClaimCreationError(RetryableError):
    """A generated claim could not be created yet (template or class missing, API error)."""

    def __init__(self, message: str, *, waits_for: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        #: ("template", "ns/name") or ("class", "name"): re-queue the pod when it appears;
        #: ("quota", "ns"): when a ResourceQuota of the namespace changes.
        self.waits_for = waits_for


class KubeError(DracoError):
    """The API server refused a request; `status` is the HTTP status, `reason` its reason."""

    def __init__(self, message: str, *, status: int, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFoundError(KubeError):
    """The object (or its namespace) does not exist."""


class ConflictError(KubeError, RetryableError):
    """The object changed since it was read (stale resourceVersion or failed precondition):
    re-read it and decide again."""


class AlreadyExistsError(KubeError):
    """An object with that name already exists."""


class APIUnavailableError(KubeError, RetryableError):
    """The API server did not answer (connection refused or reset: it is restarting) or
    said it cannot answer now (429, 503, 504: its storage is re-initializing, etcd is
    slow): try again later. `status` is 0 when no answer came."""


class UnsupportedServerError(DracoError):
    """The API server is too old for draco (or lacks a feature draco cannot do without);
    the message names the version and the feature."""


class CredentialsError(DracoError):
    """No kubeconfig and no in-cluster service account: nowhere to find the API server."""


class SemVerError(DracoError, ValueError):
    """The text is not a SemVer 2.0.0 version."""


class DeviceConfigError(AgentError):
    """A claim's opaque device configuration is not one its driver understands."""


class NriError(AgentError):
    """The container runtime's NRI connection failed, or a message on it is malformed."""
