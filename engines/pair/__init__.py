"""`specviz pair`: will a draft model pay for a target on this machine, before any run?
"""
