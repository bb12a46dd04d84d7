"""Training heads for a target (Medusa, EAGLE): the target's answers to train on, the
prompts they answer, the training loops. Never imported by a run.
"""
