"""Models by name: the registry, the local cache and downloads into it, Hugging Face Hub
names, and the models other tools already keep on this machine.
"""
