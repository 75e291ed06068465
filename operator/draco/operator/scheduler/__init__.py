"""Allocation of gated pods: resolve their claims, allocate on one node, pin and un-gate."""
