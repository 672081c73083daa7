"""The functional core: pure functions of (desired, observed, now).

Nothing in this package reads the clock, the network or files.
"""
