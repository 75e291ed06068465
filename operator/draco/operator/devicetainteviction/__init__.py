"""Device-taint eviction: pods whose allocated devices carry an untolerated NoExecute taint
are deleted, and DeviceTaintRules show the `EvictionInProgress` condition (`service`;
Kopf handlers in `handlers`)."""
