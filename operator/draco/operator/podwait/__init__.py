"""How long pods wait for their devices: from creation to allocation and to bound."""
