"""Device quota: ``status.used`` of ResourceQuotas for draco's per-class entries."""
