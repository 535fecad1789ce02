"""Errors outofplace raises, each pointing at the user's source line."""

from __future__ import annotations

from torch_mlir import ir

from .op_registry import aten_name


def source_line(loc: ir.Location) -> str:
    """The innermost user source position in `loc` as `file:line`, or '' when it has none.

    FX stack traces reach MLIR as `callsite(innermost at outer...)`, possibly wrapped in a
    NameLoc; the innermost frame is the statement the user wrote.
    """
    typeid = loc.typeid
    if typeid == ir.FileLineColLoc.static_typeid:
        file_loc = ir.FileLineColLoc(loc)
        return f"{file_loc.filename}:{file_loc.start_line}"
    if typeid == ir.NameLoc.static_typeid:
        return source_line(ir.NameLoc(loc).child_loc)
    if typeid == ir.CallSiteLoc.static_typeid:
        return source_line(ir.CallSiteLoc(loc).callee)
    if typeid == ir.FusedLoc.static_typeid:
        for inner in ir.FusedLoc(loc).locations:
            if found := source_line(inner):
                return found
    return ""


class UserError(Exception):
    """A program or an input outofplace refuses: the user's to fix at the source line the
    message names. Every other exception escaping outofplace is a bug of ours, reported
    as an internal error with a reproducer (transforms/diagnostics.py, outofplace-opt)."""


class UserIndexError(UserError, IndexError):
    """A constant index outside its dimension, or an index eager rejects: eager raises
    IndexError too."""


class UnsupportedMutationError(UserError):
    """A mutation outofplace cannot turn into value semantics without changing the result.

    The message names the op, the index (when there is one) and the user's source line, so
    the user finds the statement at fault without reading IR.
    """

    def __init__(self, op: str, reason: str, *, index: str | None = None,
                 location: str = "", shape_from_values: bool = False) -> None:
        self.op = op
        self.reason = reason
        self.index = index
        self.location = location
        # The op's shape depends on tensor values (`x[mask]`), which one static-shape
        # program cannot express: torch.compile's dynamo splits such a program there
        # and runs the op eagerly between two graphs (docs/api.md).
        self.shape_from_values = shape_from_values
        where = f"{location}: " if location else ""
        at = f" at index {index}" if index else ""
        super().__init__(f"{where}unsupported mutation by {op}{at}: {reason}")

    @classmethod
    def at(cls, operation: ir.Operation, reason: str, *, index: str | None = None
           ) -> "UnsupportedMutationError":
        """The error for `operation`, with the source line taken from its location."""
        return cls(aten_name(operation), reason, index=index,
                   location=source_line(operation.location))


class EngineUnavailableError(UserError, ImportError):
    """The engine asked for cannot run here: its extra is not installed, or the name is
    not an engine's. Raised by `outofplace.compile`, before anything is traced."""


class OutOfBoundsPolicyWarning(UserWarning):
    """A runtime index whose out-of-bounds behaviour differs from eager's: eager raises,
    the compiled program clamps (dynamic_update_slice) or drops (scatter), or pairs two
    bool masks' trues up to the lesser count (masks.py)."""


def warn_out_of_bounds_policy(operation: ir.Operation, policy: str,
                              what: str = "a runtime position out of bounds") -> None:
    """Warns, at the user's source line, that `what` (eager's IndexError) is `policy`."""
    import warnings

    where = source_line(operation.location)
    warnings.warn(f"{where + ': ' if where else ''}{what} is "
                  f"{policy} by the compiled program; eager raises IndexError (so does "
                  "outofplace.compile(..., check_bounds=True))",
                  OutOfBoundsPolicyWarning, stacklevel=2)
