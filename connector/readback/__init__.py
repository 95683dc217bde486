"""Reading a landing zone back: the reader, the validator, replay, the Delta oracle and ``verify``."""
