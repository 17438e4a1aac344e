"""A GPU for the program's process in the --in-run tests: it notes every setting it is
given in ``$EOPT_TEST_CHILD_GPU_LOG`` (the parent's fake NVML lives in the parent only)."""

from __future__ import annotations

import json
import os


class NotingGPU:
    def __init__(self, index: int) -> None:
        self.index = index

    def synchronize(self) -> None:
        return None

    def set_operating_point(self, point) -> None:
        with open(os.environ["EOPT_TEST_CHILD_GPU_LOG"], "a", encoding="utf-8") as f:
            f.write(json.dumps(point.to_dict()) + "\n")


def open_devices(backend, indices, control=True):
    assert backend == "nvml" and control
    return [NotingGPU(i) for i in indices]
