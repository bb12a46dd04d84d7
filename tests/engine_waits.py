"""How long a test waits on an engine process before calling it hung.

No verdict rests on these: what a test checks is what the engine did (a lane built, a K
taken before the first step, an end on being asked), and a run that must still be going when
the test acts is paused first, so it cannot end however fast the machine is. The waits only
turn a hung engine into a failure instead of a hung suite, so they are sized for a busy
machine, not a quiet one: beside two busy processes on two cores, the engine (at nice 5) took
73 s to start and build two lanes of the tiny model, 12 s on the same machine quiet.
"""

from __future__ import annotations

HUNG_S = 300
HUNG_MS = HUNG_S * 1000  # for qtbot's waits
