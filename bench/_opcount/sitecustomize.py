"""Counts the bytecodes PAIR's proxy worker runs, per function (``bench/opcodes.py``).

Python imports ``sitecustomize`` at start when it is on the path: ``opcodes.py`` puts this
folder first on the worker's ``PYTHONPATH`` (through ``PAIR_BENCH_WORKER_PREFIX``) and names
the output in ``PAIR_OPCOUNT_OUT``. In the proxy worker only, SIGUSR1 starts counting (every
thread's new frames traced with ``f_trace_opcodes``) and SIGUSR2 stops and writes one JSON row
per function: file, first line, name, bytecodes run, calls (a coroutine's resume counts as a
call). Any other process that imports it is left alone.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

_OUT = os.environ.get("PAIR_OPCOUNT_OUT")
_Key = tuple[str, int, str]


def _install(out: str) -> None:
    ops: collections.Counter[_Key] = collections.Counter()
    calls: collections.Counter[_Key] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = (code.co_filename, code.co_firstlineno, code.co_name)
        calls[key] += 1

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                ops[key] += 1
            return local

        return local

    def start(signum: int, frame: FrameType | None) -> None:
        ops.clear()
        calls.clear()
        sys.settrace(tracer)
        threading.settrace(tracer)

    def dump(signum: int, frame: FrameType | None) -> None:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
        rows = [[*key, ops[key], calls[key]] for key in set(ops) | set(calls)]
        with open(out, "w", encoding="utf-8") as file:
            json.dump(rows, file)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, dump)


if _OUT and "worker" in sys.argv and "proxy" in sys.argv:
    _install(_OUT)
