"""The node agent: publishes a node's devices as ResourceSlices and prepares the devices of
claims allocated on the node (CDI specs, KEP-5304 metadata files, ``status.devices``).

The agent runs plain asyncio watch loops rather than Kopf: one process can stand in for
hundreds of simulated nodes, and per-object Kopf handlers (with their annotations-based
progress storage on every claim) would cost more than the work itself. See docs/agent.md.
"""
