"""Entry-point module: triton looks here for exactly one concrete DriverBase subclass."""
from ..driver.cpu_driver import CPUDriver

__all__ = ["CPUDriver"]
