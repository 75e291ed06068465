"""Worker processes for pure calls, fed over pipes: where the offloader evaluates CEL.

A `WorkerProcesses` is a `concurrent.futures.Executor` (so `loop.run_in_executor` takes
it) whose workers are plain ``python`` children: a call is its function and arguments
pickled onto the worker's stdin, its answer (value or exception) pickled back on stdout,
one at a time and in order. Why not multiprocessing's `ProcessPoolExecutor`, which it
replaces:

- with the ``spawn`` start method (never ``fork`` a process that runs threads and an
  event loop) the pool starts a second helper process, multiprocessing's resource
  tracker (~12 MB resident), for the named semaphores of its queues, and each worker
  re-imports the parent's ``__main__`` module; here a worker imports only what its calls
  need;
- a pool worker never sees its parent die (its call queue holds the write end of its own
  pipe), so it had to poll its parent's pid; here the parent's death closes the worker's
  stdin and the worker exits at end-of-file, whatever killed the parent.

A worker that dies (killed, out of memory) fails every call it had with
`BrokenProcessPool`, as a process pool does, and so does any later `submit`: the owner
starts a new `WorkerProcesses` (the offloader does, on its next call).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, InvalidStateError
from concurrent.futures.process import BrokenProcessPool
from typing import IO, Any, Final, TypeVar

__all__ = ["WorkerProcesses", "serve"]

T = TypeVar("T")

#: Frame header: the payload's length, 8 bytes big-endian.
_HEADER: Final = struct.Struct(">Q")

#: What the child runs: the parent's import path first (as multiprocessing's spawn does,
#: so that a checkout named by PYTHONPATH or a test's path resolves the same), then `serve`.
_BOOTSTRAP: Final = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from draco.runtime.workerprocess import serve; serve()"
)

_Call = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class _Worker:
    """One child process: a writer thread sends calls, a reader thread settles them."""

    def __init__(self, name: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, json.dumps(sys.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.pid = self.process.pid
        self._calls: queue.Queue[_Call | None] = queue.Queue()
        #: Calls written to the child, oldest first: its answers come in this order.
        self._sent: deque[Future[Any]] = deque()
        self._lock = threading.Lock()
        self.broken: str | None = None
        self._writer = threading.Thread(target=self._write, name=f"{name}-writer", daemon=True)
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._writer.start()
        self._reader.start()

    @property
    def load(self) -> int:
        return self._calls.qsize() + len(self._sent)

    def submit(self, call: _Call) -> None:
        with self._lock:
            if self.broken is not None:
                raise BrokenProcessPool(self.broken)
            self._calls.put(call)

    def close(self) -> None:
        """No more calls: the child exits at end-of-file once it answered what it has."""
        self._calls.put(None)

    def join(self) -> None:
        self._writer.join()
        self._reader.join()
        self.process.wait()

    def cancel_waiting(self) -> None:
        """Cancel the calls not yet sent to the child."""
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                return
            if call is None:
                self._calls.put(None)  # keep the close for the writer
                return
            call[0].cancel()

    def _write(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        gone = False
        while (call := self._calls.get()) is not None:
            future, fn, args, kwargs = call
            if not future.set_running_or_notify_cancel():
                continue  # cancelled before it was sent
            with self._lock:
                reason = self.broken or ("the worker process is gone" if gone else None)
            if reason is not None:
                future.set_exception(BrokenProcessPool(reason))
                continue
            try:
                payload = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # an unpicklable call fails alone
                future.set_exception(exc)
                continue
            with self._lock:
                self._sent.append(future)
            try:
                stdin.write(_HEADER.pack(len(payload)))
                stdin.write(payload)
                stdin.flush()
            except OSError:
                gone = True  # the reader sees end-of-file and fails what was sent
        with contextlib.suppress(OSError):
            stdin.close()

    def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        while (frame := _read_frame(stdout)) is not None:
            with self._lock:
                future = self._sent.popleft()
            try:
                ok, value = pickle.loads(frame)
            except Exception as exc:  # an answer that does not unpickle fails its call
                ok, value = False, exc
            with contextlib.suppress(InvalidStateError):  # cancelled meanwhile
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
        code = self.process.wait()
        with self._lock:
            self.broken = f"the worker process {self.pid} exited (code {code})"
            failed = list(self._sent)
            self._sent.clear()
        for future in failed:
            with contextlib.suppress(InvalidStateError):
                future.set_exception(BrokenProcessPool(self.broken))
        # Calls still queued: the writer fails them as it meets them (broken is set).
        self._calls.put(None)


def _read_frame(stream: IO[bytes]) -> bytes | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    payload = stream.read(size)
    return payload if len(payload) == size else None


class WorkerProcesses(Executor):
    """``processes`` worker processes, started at the first call; see the module docstring."""

    def __init__(self, processes: int, *, name: str = "draco-worker") -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self._processes = processes
        self._name = name
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._shut = False

    @property
    def pids(self) -> list[int]:
        return [worker.pid for worker in self._workers]

    @property
    def broken(self) -> bool:
        """A worker died: every later `submit` raises `BrokenProcessPool`."""
        return any(worker.broken is not None for worker in self._workers)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new calls after shutdown")
            for worker in self._workers:
                if worker.broken is not None:
                    raise BrokenProcessPool(worker.broken)
            if len(self._workers) < self._processes:
                self._workers.append(_Worker(f"{self._name}-{len(self._workers)}"))
            worker = min(self._workers, key=lambda w: w.load)
        future: Future[T] = Future()
        worker.submit((future, fn, args, kwargs))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shut = True
            workers = list(self._workers)
        for worker in workers:
            if cancel_futures:
                worker.cancel_waiting()
            worker.close()
        if wait:
            for worker in workers:
                worker.join()


# --- in the child ------------------------------------------------------------------------


def serve() -> None:
    """The child's loop: read a call, run it, write its answer; exit at end-of-file.

    The pipes are moved off fds 0 and 1 first, so that anything a call prints goes to
    stderr instead of into the answers. SIGINT is ignored: a terminal's Ctrl-C reaches the
    whole process group, and the parent, not the worker, decides when work stops."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    calls = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    while (frame := _read_frame(calls)) is not None:
        try:
            fn, args, kwargs = pickle.loads(frame)
            answer: tuple[bool, Any] = (True, fn(*args, **kwargs))
        except BaseException as exc:  # every failure goes back to the caller
            answer = (False, exc)
        try:
            payload = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            payload = pickle.dumps((False, RuntimeError(f"answer does not pickle: {exc!r}")))
        try:
            answers.write(_HEADER.pack(len(payload)))
            answers.write(payload)
            answers.flush()
        except BrokenPipeError:
            return  # the parent is gone
