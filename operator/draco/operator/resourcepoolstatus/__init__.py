"""ResourcePoolStatusRequests answered: what is free in a driver's pools (KEP-5677)."""
