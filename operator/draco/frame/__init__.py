"""The frame both Kopf processes of draco run in (`draco operator`, `draco webhook`): Kopf's
login from draco's credentials, the Kopf settings they share, and what draco supplies
under Kopf where Kopf falls short for them (see docs/architecture.md, "Kopf")."""
