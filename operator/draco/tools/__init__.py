"""Tools around the processes: offline simulation and a local development control plane."""
