"""The collective check: ranks agree on each compiled graph's collectives at its first call, so a
mismatch raises an error naming the collective, its FX node and the user's line instead of hanging.

``fingerprint`` describes a graph's collectives, ``agree`` runs the check (the op), ``graph_pass``
inserts it, ``flight_recorder`` adds FX nodes and source lines to flight-recorder dumps.
"""
