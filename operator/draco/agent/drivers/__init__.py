"""Device drivers: where the agent learns which devices a node has (see `base`)."""
