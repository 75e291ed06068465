"""The DRA CEL environment: device selectors compiled once and evaluated fast.

`compile_selector(expression)` gives a `CompiledSelector` whose `matches(DeviceView)`
evaluates it on one device, with upstream's semantics: `device.driver`,
`device.attributes[domain].name`, `device.capacity[domain].name`,
`device.allowMultipleAllocations`, unqualified names in the driver's domain, versions as
semver values, the Kubernetes quantity and semver libraries, `duration()` and
`timestamp()`, missing keys as errors, and kube-apiserver's compile-time rules: the
estimated cost limit (with cel-go's size bounds: a string reached through `.?` has none),
homogeneous list and map literals, and cel-go's parser nesting limits.

List-typed attribute values and `includes()` are always on (upstream: the alpha
DRAListTypeAttributes gate, off by default in 1.37).
"""

from __future__ import annotations

from draco.cel.device import AttrValue, DeviceView, split_qualified_name
from draco.cel.selector import (
    MAX_ESTIMATED_COST,
    MAX_EXPRESSION_BYTES,
    MISSING_KEY_HINT,
    RUNTIME_COST_LIMIT,
    CompiledSelector,
    SelectorCostError,
    SelectorRuntimeError,
    compile_selector,
    estimate_cost,
)
from draco.cel.semver import SemVer, SemVerError

__all__ = [
    "MAX_ESTIMATED_COST",
    "MAX_EXPRESSION_BYTES",
    "MISSING_KEY_HINT",
    "RUNTIME_COST_LIMIT",
    "AttrValue",
    "CompiledSelector",
    "DeviceView",
    "SelectorCostError",
    "SelectorRuntimeError",
    "SemVer",
    "SemVerError",
    "compile_selector",
    "estimate_cost",
    "split_qualified_name",
]
