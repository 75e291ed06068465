"""What every draco process runs on: work queues, metrics, health probes, TLS material."""
