"""The IREE engine's error, raised by its compiler and its alias check alike."""


class IreeCompileError(RuntimeError):
    """IREE rejected the module; the message holds its diagnostics."""
