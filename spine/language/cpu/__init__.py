"""triton-cpu's `triton.language.extra.cpu`: CPU math (`from triton.language.extra.cpu import libdevice`)
and `vnni_decode` (vnni.py)."""
from . import libdevice
from .vnni import vnni_decode

__all__ = ["libdevice", "vnni_decode"]
