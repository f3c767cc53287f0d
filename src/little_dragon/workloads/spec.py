"""A workload spec (family, dtype, shape parameters) and how it becomes one canonical IRModule."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from little_dragon.workloads.families import FAMILIES, build_tensors, check_shape_params, family_of


@dataclasses.dataclass(frozen=True)
class WorkloadSpec:
    family: str
    dtype: str
    shapes: tuple[tuple[str, Any], ...]  # ordered (name, value) pairs, hashable
    source: str  # synthetic:<model config or sampler>

    @classmethod
    def of(cls, family: str, dtype: str, shapes: dict[str, Any], source: str) -> "WorkloadSpec":
        fam = family_of(family)
        check_shape_params(fam, shapes, where=f"{source}: ")
        return cls(family, dtype, tuple((p, shapes[p]) for p in fam.params), source)

    @property
    def shape_dict(self) -> dict[str, Any]:
        return dict(self.shapes)

    @property
    def key(self) -> tuple:
        """Identity of the spec regardless of where it came from (sources differ for equal kernels)."""
        return (self.family, self.dtype, self.shapes)

    @property
    def name(self) -> str:
        parts = [f"{k}{v}" for k, v in self.shapes]
        return "_".join([self.family, *parts, self.dtype])

    def shapes_json(self) -> str:
        return json.dumps(self.shape_dict, sort_keys=True)

    def flops(self) -> float:
        return float(FAMILIES[self.family].flops(self.shape_dict))


def build_module(spec: WorkloadSpec):
    """The spec's kernel as an IRModule with one schedulable PrimFunc named ``main``."""
    import tvm
    from tvm import te

    tensors = build_tensors(spec.family, spec.shape_dict, spec.dtype)
    func = te.create_prim_func(tensors).with_attr("global_symbol", "main")
    return tvm.IRModule({"main": func})
