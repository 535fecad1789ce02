"""Shape families: one program per input shape, sharing arguments and aliased state.

Serving runs prefill at a few prompt lengths and decode at length 1, all updating the
same static KV cache in place. StableHLO for XLA or Neuron takes static shapes, so each
shape is its own program (as vllm-neuron compiles one per bucket); a family checks that
its members take the same arguments and update the same ones, so a runtime can hand one
cache to any of them, and picks the member for a call by the shapes of its tensors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .compiled import Compiled, compile as compile_program

Example = tuple | tuple[tuple, dict]  # args, or (args, kwargs)


def _split(example: Any) -> tuple[tuple, dict]:
    if isinstance(example, tuple) and len(example) == 2 and isinstance(example[0], tuple) \
            and isinstance(example[1], dict):
        return example
    return tuple(example), {}


def _shapes(member: Compiled, args: tuple, kwargs: dict) -> tuple:
    """The shapes and dtypes of a call's tensor inputs, the key of a member."""
    return tuple((tuple(t.shape), t.dtype) for t in member.signature.user_inputs(args, kwargs)
                 if isinstance(t, torch.Tensor))


def _aliases(member: Compiled) -> dict[str, int]:
    """Each updated argument's name and the position of its result among the aliases."""
    return {member.input_names[arg]: rank for rank, arg in enumerate(sorted(member.io_map))}


class CompiledFamily:
    """Programs of one torch program for several input shapes; call it like the program."""

    def __init__(self, members: list[Compiled], keys: list[tuple]) -> None:
        self.members = members
        self._by_shapes = dict(zip(keys, members))

    @property
    def input_names(self) -> list[str]:
        return self.members[0].input_names

    def member(self, *args: Any, **kwargs: Any) -> Compiled:
        """The program for the shapes of these arguments."""
        key = _shapes(self.members[0], args, kwargs)
        member = self._by_shapes.get(key)
        if member is None:
            known = "; ".join(str([list(s) for s, _ in k]) for k in self._by_shapes)
            raise ValueError(f"no program of this family takes inputs of shapes "
                             f"{[list(s) for s, _ in key]}; compiled for: {known}")
        return member

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.member(*args, **kwargs)(*args, **kwargs)

    def save(self, directory: str, **options: Any) -> Path:
        """Writes each member as `Compiled.save` does, in `member_<i>/`, and
        `manifest.json`: the arguments, the aliased ones, and each member's input shapes."""
        out = Path(directory)
        members = []
        for number, (key, member) in enumerate(self._by_shapes.items()):
            member.save(str(out / f"member_{number}"), **options)
            user = member.input_names[len(member.signature.state_targets):]
            members.append({"directory": f"member_{number}",
                            "input_shapes": {name: list(shape)
                                             for name, (shape, _) in zip(user, key)}})
        manifest = {"inputs": self.input_names,
                    "aliased_inputs": sorted(_aliases(self.members[0])),
                    "members": members}
        path = out / "manifest.json"
        path.write_text(json.dumps(manifest, indent=2) + "\n")
        return path


def compile_family(f: Any, examples: list[Example], **options: Any) -> CompiledFamily:
    """Compiles `f` once for each example's shapes (`examples`: argument tuples, or
    `(args, kwargs)` pairs); `options` go to `outofplace.compile`.

    Every member must take the same arguments (names and order) and update the same
    ones, else a ValueError says which differ: that is what lets one cache serve all."""
    if not examples:
        raise ValueError("compile_family needs at least one example")
    members, keys = [], []
    for example in examples:
        args, kwargs = _split(example)
        member = compile_program(f, args, kwargs, **options)
        key = _shapes(member, args, kwargs)
        if key in keys:
            raise ValueError(f"two examples have the same input shapes {[list(s) for s, _ in key]}")
        if members:
            first = members[0]
            if member.input_names != first.input_names:
                raise ValueError(f"the example of shapes {[list(s) for s, _ in key]} takes "
                                 f"arguments {member.input_names}, the first "
                                 f"{first.input_names}")
            if _aliases(member) != _aliases(first):
                raise ValueError(f"the example of shapes {[list(s) for s, _ in key]} updates "
                                 f"{sorted(_aliases(member))}, the first "
                                 f"{sorted(_aliases(first))}")
        members.append(member)
        keys.append(key)
    return CompiledFamily(members, keys)
