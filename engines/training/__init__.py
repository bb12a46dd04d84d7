"""Training heads for a target (Medusa, EAGLE): the target's answers to train on and their
cache, the training loops, text the target reads. Never imported by a run.
"""
