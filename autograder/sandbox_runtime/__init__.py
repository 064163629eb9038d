"""Code that runs inside sandbox processes.

This package is copied into each sandbox folder, so it must import nothing from the rest of
`autograder` and hold nothing secret. The trusted side uses `codec.decode` from here too: one codec,
two halves.
"""
