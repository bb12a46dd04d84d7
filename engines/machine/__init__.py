"""What this machine is and can do: processor, devices and dtypes, what a backend needs to
run here, the system libraries Qt needs (`specviz doctor`, engines/doctor.py, reports them).
"""
