"""The engine process and what it hosts: the run spec and its builder, the model pool, the
messages to and from a window, and the TCP relay that serves windows on other machines.
"""
