"""The window's side of an engine process: start it, send it messages, hear what it says.

QProcess delivers the engine's output on the GUI thread as it comes, so no thread of ours
waits on the pipe; each line is one engines.host.protocol message, passed on as a signal. When the
process ends unasked (a signal, out of memory), `died` says so in one line, and the next
`ensure_started` starts a fresh one. app.run.remote_engine speaks to an engine on another
machine the same way.
"""

from __future__ import annotations

import sys
from collections import deque

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal

from ...engines.errors import SpecvizError
from ...engines.host import protocol
from ...engines.host.exit_line import death_line
from ...engines.machine.hardware import BESIDE_A_WINDOW

STDERR_LINES = 20  # the engine's last words, kept for the message when it dies


class EngineLink(QObject):
    """What every engine client shares: protocol lines in, typed signals out (each message
    decoded once, here, as superqt's workers report started/yielded/finished/errored)."""

    died = Signal(str)  # one line: what ended the engine
    # A run's lanes
    laneStarted = Signal(str, object)  # lane id, its trace header (dict)
    laneEvent = Signal(str, object)  # lane id, an events.StepEvent or SummaryEvent
    laneBatch = Signal(str, object)  # lane id, a BatchStep or StreamsSummary (N streams)
    laneFailed = Signal(str, str)  # lane id, why: the lane has ended
    controlRefused = Signal(str, str)  # lane id, why a control (K, auto K, a knob) was refused
    laneNote = Signal(str, str)  # lane id, what the person should know (the lane ran well)
    status = Signal(str)  # what the engine is doing ("loading ...")
    runDone = Signal(object)  # the run's model pool figures: {"loads": ..., "idle": ...}
    runRefused = Signal(str)  # the engine refused the run itself
    # Tasks besides runs (a cost profile, a pair check)
    taskProgress = Signal(str, str, int, int)  # task, stage, done, total
    taskFinished = Signal(str, object)  # task, its result
    taskFailed = Signal(str, str)  # task, why

    def __init__(self, device: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.device = device
        self.build = ""  # the backend's build, once a lane has started (for a crash's line)
        self._buffer = b""

    def _take(self, data: bytes) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                message = protocol.decode(line)
            except protocol.ProtocolError as exc:
                print(f"specviz: engine said something unreadable ({exc})", file=sys.stderr)
                continue
            if message.kind == "started":
                self.build = message.fields.get("build", self.build)
            self._heard(message)
            try:
                self._tell(message)
            except KeyError as exc:
                print(f"specviz: engine said {message.kind} without {exc}", file=sys.stderr)

    def _tell(self, message: protocol.Message) -> None:
        """The typed signal of a message (a field missing: KeyError)."""
        f, kind = message.fields, message.kind
        if kind == "event":
            self.laneEvent.emit(f["lane"], f["event"])
        elif kind == "batch":
            self.laneBatch.emit(f["lane"], f["batch"])
        elif kind == "started":
            self.laneStarted.emit(f["lane"], f["header"])
        elif kind == "failed":
            self.laneFailed.emit(f["lane"], f["message"])
        elif kind == "refused":
            self.controlRefused.emit(f["lane"], f["message"])
        elif kind == "note":
            self.laneNote.emit(f["lane"], f["text"])
        elif kind == "status":
            self.status.emit(f["text"])
        elif kind == "done":
            self.runDone.emit({k: f.get(k) for k in ("loads", "idle")})
        elif kind == "error" and f.get("request") == "run":
            self.runRefused.emit(f["message"])
        elif kind == "progress":
            self.taskProgress.emit(f["task"], f["stage"], f["done"], f["total"])
        elif kind == "finished":
            self.taskFinished.emit(f["task"], f["result"])
        elif kind == "task_failed":
            self.taskFailed.emit(f["task"], f["message"])

    def _heard(self, message: protocol.Message) -> None:
        """A message about the link itself (a subclass's business)."""


class EngineClient(EngineLink):
    def __init__(self, device: str, parent: QObject | None = None) -> None:
        super().__init__(device, parent)
        self._proc: QProcess | None = None
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._closing = False

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.state() != QProcess.ProcessState.NotRunning

    @property
    def pid(self) -> int | None:
        return int(self._proc.processId()) if self.running else None

    def ensure_started(self) -> None:
        if self.running:
            return
        self._buffer, self._closing = b"", False
        self._stderr.clear()
        proc = self._proc = QProcess(self)
        proc.readyReadStandardOutput.connect(self._read)
        proc.readyReadStandardError.connect(self._read_stderr)
        proc.finished.connect(self._finished)
        env = QProcessEnvironment.systemEnvironment()
        env.insert(BESIDE_A_WINDOW, "1")  # its automatic threads leave the GUI a core
        proc.setProcessEnvironment(env)
        proc.start(sys.executable, ["-m", "specviz.engines.host.engine_process"])
        if not proc.waitForStarted(30_000):
            raise SpecvizError(f"the engine process did not start: {proc.errorString()}")

    def send(self, kind: str, **fields) -> None:
        if self.running:
            self._proc.write(protocol.encode(kind, **fields))

    def shutdown(self, timeout: float) -> bool:
        """Ask the process to stop and end; wait `timeout` seconds, then kill it. What it
        said before ending is delivered before this returns."""
        if not self.running:
            return True
        self._closing = True
        self.send("shutdown")
        self._proc.closeWriteChannel()
        ended = self._proc.waitForFinished(int(timeout * 1000))
        if not ended:
            self._proc.kill()
            self._proc.waitForFinished(2000)
        self._read()
        return ended

    # ------------------------------------------------------------ from the process

    def _read(self) -> None:
        if self._proc is not None:
            self._take(bytes(self._proc.readAllStandardOutput().data()))

    def _read_stderr(self) -> None:
        text = bytes(self._proc.readAllStandardError().data()).decode("utf-8", "replace")
        sys.stderr.write(text)  # the engine's warnings and tracebacks stay visible
        self._stderr.extend(line for line in text.splitlines() if line.strip())

    def _finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self._read()
        if self._closing:  # asked to end, or killed by us when it did not in time
            return
        self.died.emit(death_line(code, status == QProcess.ExitStatus.CrashExit, self.build,
                                  list(self._stderr)))
