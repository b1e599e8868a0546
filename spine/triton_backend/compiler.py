"""Entry-point module: triton looks here for exactly one concrete BaseBackend subclass."""
from ..compiler.backend import CPUBackend

__all__ = ["CPUBackend"]
