"""Hardware operating-point control: operating points and devices (NVML, simulated).

Importing this package never touches NVML; backends load on demand.
"""

from eopt.devices.operating_point import OperatingPoint

__all__ = ["OperatingPoint"]
