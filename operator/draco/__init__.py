"""draco: Kubernetes Dynamic Resource Allocation for any cluster.

The package is layered like the system it runs (see docs/architecture.md):

- `draco.api`          models of `resource.draco.dev/v1` (the shape of `resource.k8s.io/v1`)
- `draco.cel`          the DRA CEL environment for device selectors
- `draco.validation`   the API server's rules, as field errors
- `draco.allocator`    pure allocation: inventory + claims + node -> devices or reasons
- `draco.operator`  the operator's thin Kopf handlers over services
- `draco.webhook`     admission for our kinds and for pods
- `draco.agent`        the node agent: publishing and preparing devices
- `draco.cli`          the `draco` command

Lower layers never import higher ones; the allocator does no I/O.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
