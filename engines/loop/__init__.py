"""One run's loop: the session that asks the oracle, verifies with the target and emits step
events; verification of chains and trees; sampling; detokenisation.
"""
