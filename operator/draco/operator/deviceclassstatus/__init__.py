"""DeviceClass status: how many published devices a class selects, how many are allocated,
and whether its selectors and configuration are valid."""
