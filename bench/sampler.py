"""A sampling profiler of this process's threads (py-spy is not installed here): every few
milliseconds it records the stack of each thread whose name starts with a prefix, then prints the
functions seen most often on those stacks (cumulative) and at their tops (self). Used by benches
to say where an epoch's time goes (`SPARKWAVE_BENCH_PROFILE=1`)."""

from __future__ import annotations

import sys
import threading
from collections import Counter


class Sampler:
    def __init__(self, prefix: str = "sparkwave", every_s: float = 0.005) -> None:
        self.prefix, self.every_s = prefix, every_s
        self.cumulative: Counter[str] = Counter()
        self.own: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        names = {}
        while not self._stop.wait(self.every_s):
            for t in threading.enumerate():
                names[t.ident] = t.name
            for ident, frame in sys._current_frames().items():
                if not names.get(ident, "").startswith(self.prefix):
                    continue
                self.samples += 1
                seen = set()
                top = True
                f = frame
                while f is not None:
                    code = f.f_code
                    where = f"{code.co_filename.rsplit('/site-packages/', 1)[-1].rsplit('/src/', 1)[-1]}:{code.co_name}"
                    if top:
                        self.own[where] += 1
                        top = False
                    if where not in seen:
                        self.cumulative[where] += 1
                        seen.add(where)
                    f = f.f_back

    def table(self, n: int = 40) -> str:
        total = max(self.samples, 1)
        lines = [f"{self.samples} samples of threads named {self.prefix}*", "", "cumulative:"]
        lines += [f"  {100 * c / total:5.1f}%  {w}" for w, c in self.cumulative.most_common(n)]
        lines += ["", "self:"]
        lines += [f"  {100 * c / total:5.1f}%  {w}" for w, c in self.own.most_common(n // 2)]
        return "\n".join(lines)
