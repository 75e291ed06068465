"""The resource API draco serves: models, quantities, names, limits and CRDs."""
