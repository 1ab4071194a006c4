"""The appliance: config, CLI, supervisor, roles, recovery, store checker. Importing it changes
nothing in the process; ``python -m rocketbox.appliance`` sets the process up first
(``appliance/process.py``)."""
