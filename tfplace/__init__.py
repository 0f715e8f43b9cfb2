"""tfplace: device placement for TensorFlow graphs too large for one device (Celeritas)."""

from tfplace._version import __version__

__all__ = ["__version__"]
