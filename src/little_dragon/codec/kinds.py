"""The instruction kinds the codec speaks: one ``KindSpec`` per TVM instruction kind.

A spec says how a JSON instruction ``[kind, inputs, attrs, outputs]`` maps to one script line: the mnemonic,
the fields in line order (each taken from an input or attribute), the options (attributes with a usual
value that is left out when it has it, written ``name=value`` otherwise), the type of the outputs and how
many there are.  The encoder, the decoder and the Lark grammar are all driven by this one table, so they
cannot disagree.  ``kinds_table`` checks it against TVM's instruction-kind registry.
"""
from __future__ import annotations

import dataclasses
from typing import Any

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Field:
    """One positional field of a line.

    src: "in" (an input) or "at" (an attribute); index: its position (variadic fields take the rest).
    type: b | l | v | bl (a block or loop) | factor (a split factor: ``_``, int or value) | value (any literal
    or variable) | name (identifier or quoted string) | key (annotation key) | thread (thread axis) |
    int | buf (two attributes: buffer index and read/write, written ``r0``/``w1``) | map (an IndexMap) |
    lit (any literal) | count (the number of outputs).
    Defaults follow the database's on-disk JSON (plain bools as 0/1, boolean IntImms as true/false).
    """

    src: str
    index: int
    type: str
    variadic: bool = False


@dataclasses.dataclass(frozen=True)
class Option:
    """An attribute (or input) with a usual value: left out when equal to ``default`` (same type too)."""

    name: str
    src: str
    index: int
    default: Any


@dataclasses.dataclass(frozen=True)
class KindSpec:
    kind: str
    mnemonic: str
    fields: tuple[Field, ...] = ()
    options: tuple[Option, ...] = ()
    out_type: str = ""  # b | l | v | "" (no outputs)
    out_count: str = "0"  # "0" | "1" | "count" (written) | "factors" (one per split factor) | "decision"
    decision: str = ""  # "" | "int" | "ints"
    n_inputs: int | None = None  # fixed input count (None: variadic)
    n_attrs: int = 0
    doc: str = ""

    @property
    def rule(self) -> str:
        return "k_" + self.mnemonic


def _f(src: str, index: int, type_: str, variadic: bool = False) -> Field:
    return Field(src, index, type_, variadic)


B0, L0 = _f("in", 0, "b"), _f("in", 0, "l")
COUNT = _f("", 0, "count")
PUI_INT = Option("pui", "at", 0, 1)  # preserve_unit_iters as MetaSchedule writes it (an integer)

SPECS: tuple[KindSpec, ...] = (
    KindSpec("GetSBlock", "blk", (_f("at", 0, "name"),), (Option("fn", "at", 1, "main"),), "b", "1",
             n_inputs=0, n_attrs=2, doc="get a block by name (in function `fn`, default main)"),
    KindSpec("GetLoops", "loops", (B0, COUNT), (), "l", "count", n_inputs=1, doc="the N loops above a block"),
    KindSpec("GetChildBlocks", "kids", (_f("in", 0, "bl"), COUNT), (), "b", "count", n_inputs=1,
             doc="the N child blocks of a block or loop"),
    KindSpec("GetProducers", "prods", (B0, COUNT), (), "b", "count", n_inputs=1, doc="the N producers of a block"),
    KindSpec("GetConsumers", "cons", (B0, COUNT), (), "b", "count", n_inputs=1, doc="the N consumers of a block"),
    KindSpec("GetOutputBlocks", "outblks", (_f("in", 0, "bl"), COUNT), (), "b", "count", n_inputs=1,
             doc="the N output blocks under a scope"),
    KindSpec("Split", "split", (L0, _f("in", 1, "factor", True)),
             (Option("pui", "at", 0, 1), Option("dp", "at", 1, 0)), "l", "factors", n_attrs=2,
             doc="split a loop by factors (`_` = inferred, int, or a sampled value)"),
    KindSpec("Fuse", "fuse", (_f("in", 0, "l", True),), (PUI_INT,), "l", "1", n_attrs=1, doc="fuse loops"),
    KindSpec("Reorder", "reorder", (_f("in", 0, "l", True),), (), n_attrs=0,
             doc="reorder loops; `reorder *`: the multi-level tiling order (see below)"),
    KindSpec("Parallel", "par", (L0,), (), n_inputs=1, doc="parallelize a loop"),
    KindSpec("Vectorize", "vec", (L0,), (), n_inputs=1, doc="vectorize a loop"),
    KindSpec("Unroll", "unroll", (L0,), (), n_inputs=1, doc="unroll a loop"),
    KindSpec("Bind", "bind", (L0, _f("at", 0, "thread")), (), n_inputs=1, n_attrs=1,
             doc="bind a loop to a thread axis (bx by bz tx ty tz vx vy vz abbreviate blockIdx/threadIdx/vthread)"),
    KindSpec("Annotate", "ann", (_f("in", 0, "bl"), _f("at", 0, "key"), _f("in", 1, "value")), (), n_inputs=2,
             n_attrs=1, doc="annotate a block or loop; `.key` abbreviates `meta_schedule.key`; typed value"),
    KindSpec("Unannotate", "unann", (_f("in", 0, "bl"), _f("at", 0, "key")), (), n_inputs=1, n_attrs=1,
             doc="remove an annotation"),
    KindSpec("CacheRead", "cread", (B0, _f("at", 0, "int"), _f("at", 1, "name")), (Option("c", "in", 1, []),),
             "b", "1", n_inputs=2, n_attrs=2, doc="cache read buffer #i into a scope (`c=[...]`: consumer blocks)"),
    KindSpec("CacheWrite", "cwrite", (B0, _f("at", 0, "int"), _f("at", 1, "name")), (Option("c", "in", 1, []),),
             "b", "1", n_inputs=2, n_attrs=2, doc="cache write buffer #i into a scope"),
    KindSpec("ComputeAt", "at", (B0, _f("in", 1, "l")), (Option("pul", "at", 0, 1), Option("i", "at", 1, -1)),
             n_inputs=2, n_attrs=2, doc="compute a block at a loop"),
    KindSpec("ReverseComputeAt", "rat", (B0, _f("in", 1, "l")),
             (Option("pul", "at", 0, 1), Option("i", "at", 1, -1)), n_inputs=2, n_attrs=2,
             doc="reverse-compute a block at a loop"),
    KindSpec("ComputeInline", "inline", (B0,), (), n_inputs=1, doc="inline a block into its consumers"),
    KindSpec("ReverseComputeInline", "rinline", (B0,), (), n_inputs=1, doc="inline a block into its producer"),
    KindSpec("DecomposeReduction", "decomp", (B0, _f("in", 1, "l")), (), "b", "1", n_inputs=2,
             doc="split a reduction's init out at a loop"),
    KindSpec("RFactor", "rfactor", (L0, _f("at", 0, "int")), (), "b", "1", n_inputs=1, n_attrs=1,
             doc="rfactor a reduction loop (factor axis)"),
    KindSpec("SamplePerfectTile", "ptile", (L0,), (Option("n", "at", 0, _MISSING), Option("m", "at", 1, 64)), "v",
             "decision", "ints", n_inputs=1, n_attrs=2,
             doc="sample N tile sizes of a loop (max innermost factor `m=`, default 64): `ptile L = t1 .. tN`; "
                 "followed by the Split of L by exactly these values it is written `tile L = t1 .. tN`"),
    KindSpec("SampleCategorical", "cat", (), (), "v", "1", "int", n_inputs=0, n_attrs=2,
             doc="sample one of the candidates (uniform unless `~ p1 .. pN`): `cat c1 .. cN = index`, or a "
                 "named list: `cat unroll = index`"),
    KindSpec("SampleComputeLocation", "loc", (B0,), (), "l", "1", "int", n_inputs=1,
             doc="sample a compute-at location of a block: `loc B = index`"),
    KindSpec("EnterPostproc", "post", (), (), n_inputs=0,
             doc="the post-processing boundary; `post *` (last line): what the target's post-processors do, "
                 "derived from the workload and target at decode time"),
    KindSpec("ReIndex", "reindex", (B0, _f("at", 0, "buf")), (), "b", "1", n_inputs=1, n_attrs=2,
             doc="re-index buffer r<i>/w<i> of a block"),
    KindSpec("TransformLayout", "layout", (B0, _f("at", 0, "buf"), _f("in", 1, "map")),
             (Option("pad", "at", 2, None), Option("inj", "at", 3, True)), n_inputs=2, n_attrs=4,
             doc="transform buffer r<i>/w<i> by an index map"),
    KindSpec("TransformBlockLayout", "blayout", (B0, _f("at", 0, "map")), (), n_inputs=1, n_attrs=1,
             doc="transform a block's iteration space by an index map"),
    KindSpec("Blockize", "blockize", (_f("in", 0, "l"),), (Option("pui", "at", 0, True),), "b", "1", n_inputs=1, n_attrs=1,
             doc="make the subtree of a loop a block"),
    KindSpec("Tensorize", "tensorize", (_f("in", 0, "bl"), _f("at", 0, "name")), (Option("pui", "at", 1, True),),
             n_inputs=1, n_attrs=2, doc="tensorize a block or loop with an intrinsic"),
    KindSpec("StorageAlign", "align", (B0, _f("at", 0, "int"), _f("at", 1, "int"), _f("at", 2, "int"),
                                        _f("at", 3, "int")), (), n_inputs=1, n_attrs=4,
             doc="storage-align buffer, axis, factor, offset"),
    KindSpec("SetScope", "scope", (B0, _f("at", 0, "int"), _f("at", 1, "name")), (), n_inputs=1, n_attrs=2,
             doc="set the storage scope of buffer #i"),
    KindSpec("UnsafeSetDType", "setdtype", (B0, _f("at", 0, "int"), _f("at", 1, "name")), (), n_inputs=1,
             n_attrs=2, doc="unsafely set the dtype of buffer #i"),
    KindSpec("PadEinsum", "pad", (B0, _f("at", 0, "lit")), (), n_inputs=1, n_attrs=1,
             doc="pad an einsum block's iterators"),
    KindSpec("AddUnitLoop", "unitloop", (_f("in", 0, "bl"),), (), "l", "1", n_inputs=1,
             doc="add a unit loop above a block or loop"),
)

BY_KIND: dict[str, KindSpec] = {s.kind: s for s in SPECS}
BY_MNEMONIC: dict[str, KindSpec] = {s.mnemonic: s for s in SPECS}

THREAD_ABBREV: dict[str, str] = {
    "bx": "blockIdx.x", "by": "blockIdx.y", "bz": "blockIdx.z",
    "tx": "threadIdx.x", "ty": "threadIdx.y", "tz": "threadIdx.z",
    "vx": "vthread.x", "vy": "vthread.y", "vz": "vthread.z",
}
THREAD_FULL: dict[str, str] = {v: k for k, v in THREAD_ABBREV.items()}
MS_KEY_PREFIX = "meta_schedule."

# Folded pairs (tile, at, ann … cat) are one table entry each in folds.py.
# ``*`` in place of a derived part: ``reorder *`` (derive.py), ``post *`` (postproc.py)
DERIVED = "*"
TILING_KEY = "meta_schedule.tiling_structure"
REORDER_DOC = ("`reorder *`: the order MetaSchedule's multi-level tiling gives the loops of the `tile` lines "
               "right before it, by the last `tiling` annotation (e.g. SSRSRS: level 0 of every spatial "
               "tile, level 1 of every spatial tile, level 0 of every reduction tile, ...)")
POST_DOC = ("`post *` (last line): EnterPostproc and what the target's post-processors do, re-derived from "
            "the workload and target at decode time (needs a PostprocContext)")
# the derived lines, for docs/codec.md (after the folded ones, folds.FOLDS): (form, TVM kinds, meaning)
DERIVED_FORMS_DOC: tuple[tuple[str, str, str], ...] = (
    ("reorder *", "Reorder", REORDER_DOC),
    ("post *", "EnterPostproc + post-processing", POST_DOC),
)

# Annotation keys MetaSchedule writes, as bare words (the model sees one or two tokens instead of six to
# twelve).  A bare word is looked up here first; a key that *is* one of these words is written quoted.
KEY_ABBREV: dict[str, str] = {
    "meta_schedule.tiling_structure": "tiling",
    "meta_schedule.auto_tensorize": "tensorize",
    "meta_schedule.auto_tensorize_init": "init",
    "meta_schedule.cooperative_fetch": "fetch",
    "meta_schedule.unroll_explicit": "unroll",
    "meta_schedule.unroll_implicit": "unroll_implicit",
    "meta_schedule.parallel": "parallel",
    "meta_schedule.vectorize": "vectorize",
    "meta_schedule.thread_extent_low_inclusive": "minthreads",
    "meta_schedule.thread_extent_high_inclusive": "maxthreads",
    "meta_schedule.random_compute_producer": "producer",
    "meta_schedule.layout_rewrite_preproc": "preproc",
    "pragma_auto_unroll_max_step": "max_step",
    "pragma_unroll_explicit": "explicit",
    "warp_execution": "warp",
    "software_pipeline_stage": "stage",
    "software_pipeline_order": "order",
    "software_pipeline_async_stages": "async",
}
KEY_FULL: dict[str, str] = {v: k for k, v in KEY_ABBREV.items()}

# The candidate lists MetaSchedule's schedule rules sample from (SampleCategorical), by name:
# ``cat unroll = 2`` is ``cat 0 16 64 512 = 2``.  Any other list is written out.
CANDIDATES: dict[str, tuple[int, ...]] = {
    "unroll": (0, 16, 64, 512),  # ParallelizeVectorizeUnroll, llvm
    "unroll_gpu": (0, 16, 32, 64, 128, 256, 512, 1024),  # ParallelizeVectorizeUnroll, CUDA
    "lanes": (1, 2, 3, 4),  # MultiLevelTiling cooperative fetch vector lanes
    "lanes8": (1, 2, 4, 8),  # the same, tensor-core tiling
    "threads": (32, 64, 128, 256, 512, 1024),  # AutoBind thread extents
}
CANDIDATES_NAME: dict[tuple[int, ...], str] = {v: k for k, v in CANDIDATES.items()}

# Tensor intrinsics (names registered by tvm.s_tir.tensor_intrin) written ``$word`` wherever a name or a
# string value holds one (Tensorize, the auto_tensorize annotations).  Other names stay quoted/bare.
INTRIN_ABBREV: dict[str, str] = {
    "wmma_sync_16x16x16_f16f16f32": "$sync",
    "wmma_sync_16x16x16_f16f16f32_trans": "$sync_t",
    "wmma_sync_16x16x16_f16f16f16": "$sync16",
    "wmma_sync_16x16x16_f16f16f16_trans": "$sync16_t",
    "wmma_fill_16x16x16_f32": "$fill",
    "wmma_fill_16x16x16_f16": "$fill16",
    "wmma_load_16x16x16_f16_a_shared_dyn": "$load_a",
    "wmma_load_16x16x16_f16_b_shared_dyn": "$load_b",
    "wmma_load_16x16x16_f16_b_trans_shared_dyn": "$load_bt",
    "wmma_load_16x16x16_f16_a_trans_shared_dyn": "$load_at",
    "wmma_load_16x16x16_f16_a_shared": "$load_a_s",
    "wmma_load_16x16x16_f16_a_trans_shared": "$load_at_s",
    "wmma_load_16x16x16_f16_b_shared": "$load_b_s",
    "wmma_load_16x16x16_f16_b_trans_shared": "$load_bt_s",
    "wmma_store_16x16x16_f32_shared_dyn": "$store",
    "wmma_store_16x16x16_f16_shared_dyn": "$store16",
    "wmma_store_16x16x16_f32_shared": "$store_s",
    "wmma_store_16x16x16_f16_shared": "$store16_s",
    "wmma_store_16x16x16_f32_global": "$store_g",
    "wmma_store_16x16x16_f16_global": "$store16_g",
}
INTRIN_FULL: dict[str, str] = {v: k for k, v in INTRIN_ABBREV.items()}

# The tensor intrinsics TVM 0.27 registers (``tvm.s_tir.tensor_intrin``: every module's ``*_INTRIN`` name): the only
# names Tensorize takes ("TensorIntrin '...' is not registered" otherwise).  tests/codec checks the list against the
# registry of the installed TVM.
TENSOR_INTRINSICS: tuple[str, ...] = (
    "ROCM_mfma_fill_16x16_f32", "ROCM_mfma_fill_16x16_i32", "dot_16x4_avx512", "dot_16x4_vnni",
    "dot_32x4_u8i8i32_vrmpy", "dot_32x4_u8i8i32_vtcm_vrmpy", "dot_32x4_u8u8i32_vrmpy",
    "dot_32x4_u8u8i32_vtcm_vrmpy", "dot_4x4_i8i8s32_neon", "dot_4x4_i8i8s32_sdot", "dot_4x4_u8u8i32_hdot",
    "dot_4x4_u8u8u32_udot", "dot_product_32x2_i16i16i32_vdmpy", "dp4a_s8s8s32", "dp4a_s8u8s32", "dp4a_u8s8s32",
    "dp4a_u8u8u32", "mma_e4m3e4m3f32", "mma_e4m3e4m3f32_trans_b", "mma_e5m2e5m2f32", "mma_e5m2e5m2f32_trans_b",
    "mma_f16f16f16", "mma_f16f16f16_trans_a", "mma_f16f16f16_trans_a_trans_b", "mma_f16f16f16_trans_b",
    "mma_f16f16f32", "mma_f16f16f32_trans_a", "mma_f16f16f32_trans_a_trans_b", "mma_f16f16f32_trans_b",
    "mma_fill_16x16_f16", "mma_fill_16x16_f32", "mma_fill_16x16_i32", "mma_i8i8i32", "mma_i8i8i32_trans_b",
    "mma_ldmatrix_e4m3_a", "mma_ldmatrix_e4m3_b", "mma_ldmatrix_e4m3_b_trans", "mma_ldmatrix_e5m2_a",
    "mma_ldmatrix_e5m2_b", "mma_ldmatrix_e5m2_b_trans", "mma_ldmatrix_f16_a", "mma_ldmatrix_f16_a_dyn",
    "mma_ldmatrix_f16_a_trans", "mma_ldmatrix_f16_a_trans_dyn", "mma_ldmatrix_f16_b", "mma_ldmatrix_f16_b_dyn",
    "mma_ldmatrix_f16_b_trans", "mma_ldmatrix_f16_b_trans_dyn", "mma_ldmatrix_i8_a", "mma_ldmatrix_i8_b",
    "mma_ldmatrix_i8_b_trans", "mma_store_16x16_f16_global_", "mma_store_16x16_f32_global_",
    "mma_store_16x16_f32_shared_dyn_", "mma_store_16x16_i32_global_", "rocm_mfma_f16f16f32", "rocm_mfma_f32f32f32",
    "rocm_mfma_load_16x16_a_shared_f16", "rocm_mfma_load_16x16_a_shared_s8", "rocm_mfma_load_16x4_a_shared_f32",
    "rocm_mfma_load_b_16x16_shared_f16", "rocm_mfma_load_b_16x16_shared_s8", "rocm_mfma_load_b_16x4_shared_f32",
    "rocm_mfma_s8s8s32", "rocm_mfma_store_16x16_f32", "rocm_mfma_store_16x16_s32", "sdot4",
    "simdgroup_fill_8x8x8_bf16", "simdgroup_fill_8x8x8_f32", "simdgroup_load_8x8x8_f16_shared",
    "simdgroup_load_8x8x8_f16_shared_trans", "simdgroup_make_filled_8x8x8_f16",
    "simdgroup_multiply_accumulate_8x8x8_f16", "simdgroup_store_8x8x8_f16_global",
    "simdgroup_store_8x8x8_f16_shared", "wmma_fill_16x16x16_f16", "wmma_fill_16x16x16_f32",
    "wmma_fill_16x16x16_s32", "wmma_fill_8x8x32_s32", "wmma_load_16x16x16_f16_a_shared",
    "wmma_load_16x16x16_f16_a_shared_dyn", "wmma_load_16x16x16_f16_a_trans_shared",
    "wmma_load_16x16x16_f16_a_trans_shared_dyn", "wmma_load_16x16x16_f16_b_shared",
    "wmma_load_16x16x16_f16_b_shared_dyn", "wmma_load_16x16x16_f16_b_trans_shared",
    "wmma_load_16x16x16_f16_b_trans_shared_dyn", "wmma_load_16x16x16_s8_a_shared",
    "wmma_load_16x16x16_s8_a_shared_dyn", "wmma_load_16x16x16_s8_a_trans_shared",
    "wmma_load_16x16x16_s8_a_trans_shared_dyn", "wmma_load_16x16x16_s8_b_shared",
    "wmma_load_16x16x16_s8_b_shared_dyn", "wmma_load_16x16x16_s8_b_trans_shared",
    "wmma_load_16x16x16_s8_b_trans_shared_dyn", "wmma_load_8x8x32_s4_a_shared", "wmma_load_8x8x32_s4_a_shared_dyn",
    "wmma_load_8x8x32_s4_b_trans_shared", "wmma_load_8x8x32_s4_b_trans_shared_dyn",
    "wmma_store_16x16x16_f16_global", "wmma_store_16x16x16_f16_shared", "wmma_store_16x16x16_f16_shared_dyn",
    "wmma_store_16x16x16_f32_global", "wmma_store_16x16x16_f32_shared", "wmma_store_16x16x16_f32_shared_dyn",
    "wmma_store_16x16x16_s32_global", "wmma_store_16x16x16_s32_shared", "wmma_store_16x16x16_s32_shared_dyn",
    "wmma_store_8x8x32_s32_global", "wmma_store_8x8x32_s32_shared", "wmma_store_8x8x32_s32_shared_dyn",
    "wmma_sync_16x16x16_f16f16f16", "wmma_sync_16x16x16_f16f16f16_trans", "wmma_sync_16x16x16_f16f16f32",
    "wmma_sync_16x16x16_f16f16f32_trans", "wmma_sync_16x16x16_s8s8s32", "wmma_sync_16x16x16_s8s8s32_trans",
    "wmma_sync_8x8x32_s4s4s32_trans",
)


def _schedule_method_kinds() -> set[str]:
    """Candidate kind names: every public ``tvm.s_tir.Schedule`` method, CamelCased (the registry's naming)."""
    from tvm.s_tir import Schedule

    names = set()
    for attr in dir(Schedule):
        if attr.startswith("_"):
            continue
        names.add("".join(p[:1].upper() + p[1:] for p in attr.split("_")))
    renames = {"GetSblock": "GetSBlock", "Reindex": "ReIndex", "Rfactor": "RFactor"}
    return {renames.get(n, n) for n in names} | {"EnterPostproc", "GetSBlock", "ReIndex", "RFactor"}


def kinds_table() -> list[dict[str, Any]]:
    """Rows (kind, registered in TVM, pure, mnemonic, description), from TVM's instruction-kind registry.

    TVM does not list its registry, so every name the Schedule API suggests is looked up with
    ``InstructionKind.get``; kinds found there but absent from ``SPECS`` are listed as unsupported."""
    from tvm.s_tir.schedule.instruction import InstructionKind

    rows = []
    for name in sorted(_schedule_method_kinds() | set(BY_KIND)):
        try:
            ik = InstructionKind.get(name)
        except Exception:  # noqa: BLE001 - not a registered kind
            if name in BY_KIND:
                raise RuntimeError(f"codec spec for {name!r} names no TVM instruction kind") from None
            continue
        spec = BY_KIND.get(name)
        rows.append({"kind": name, "pure": bool(ik.is_pure), "mnemonic": spec.mnemonic if spec else None,
                     "doc": spec.doc if spec else "not supported: encode raises EncodeError"})
    return rows


# instructions that look things up, sample or annotate: a script of only these transforms no loop or block (the
# judge's no-op test, evaluator.worker, and the constraint's end check, generation.schedule_worker)
QUERY_KINDS = frozenset({"GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers",
                         "GetOutputBlocks", "SampleCategorical", "SamplePerfectTile", "SamplePartitionedTile",
                         "SampleComputeLocation", "Annotate", "Unannotate", "EnterPostproc"})


def transforms_anything(trace_json: list) -> bool:
    """Whether a trace (JSON) has an instruction other than lookups, samples and annotations."""
    return any(inst[0] not in QUERY_KINDS for inst in trace_json[0])
