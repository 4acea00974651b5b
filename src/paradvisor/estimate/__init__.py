"""The cost model: memory per GPU, compute, communication and step time — pure functions.

Every estimate returns its breakdown (term -> value) so the user can see what contributed what.
No I/O and no torch here; formulas and their references are in each module's docstring.
"""
