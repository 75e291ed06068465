"""Pure scheduling logic: what a pod needs, which nodes fit it, the cluster view the
allocator reads. No I/O: the operator feeds it from its watches."""
