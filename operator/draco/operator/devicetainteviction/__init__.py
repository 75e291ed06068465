"""Device-taint eviction: pods whose allocated devices carry an untolerated NoExecute taint
are deleted, and DeviceTaintRules show the `EvictionInProgress` condition (`service`;
wired to the informers by `controller`)."""
