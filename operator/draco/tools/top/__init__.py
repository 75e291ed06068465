"""``draco top``: what is free and who holds what, per node and per DeviceClass, and the pods
that wait for devices and why, read from the API like kubectl (`cli`), computed without
I/O (`view`) and printed as tables or JSON (`render`)."""
