"""Dead letters: where poison records go under ``poison_policy: dead-letter``, below the sink that sends them.

``writer`` (the interface, and the batch's step that sends its letters), ``folder`` and ``kafka`` (the two
outputs), ``output`` (the one the settings choose).
"""
