"""One async layer over the Kubernetes API, shared by the operator, the webhook and the agent."""
