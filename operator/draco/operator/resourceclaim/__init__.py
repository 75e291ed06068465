"""The ResourceClaim lifecycle (upstream's resourceclaim controller): claims generated from
templates, reservations pruned, deallocation, deletion of generated claims, finalizers."""
