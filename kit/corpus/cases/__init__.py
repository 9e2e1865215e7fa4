"""The corpus's cases, one module each, in corpus order (``CASES``)."""

from __future__ import annotations

from importlib import import_module

from kit.corpus.case import Case
from kit.errors import ConfigError

NAMES = ("avgpool_asym_pads", "avgpool_ceil_include_pad", "pad_avgpool_fusion",
         "cast_chain_fp16", "layernorm_fusion_axis", "resize_nearest_tie",
         "pad_maxpool_fusion", "simplified_layernorm_pow", "reduce_noop_empty_axes",
         "layernorm_large_mean", "minmax_nan", "quantizelinear_fp16_truncate",
         "gemm_transpose_identity_perm", "qdq_conv_bias_scale", "reduce_empty_set",
         "simplified_layernorm_fusion_axis", "maxpool_ceil_pad_window", "qdq_gemm_alpha_bias",
         "qdq_split_output_params", "qdq_resize_linear", "qdq_propagation_const_dq",
         "matmul_scale_leading_dims")
CASES: tuple[Case, ...] = tuple(import_module(f"kit.corpus.cases.{name}").CASE
                                for name in NAMES)


def by_id(case_id: str) -> Case:
    """The case called ``case_id``; ConfigError naming the known ones otherwise."""
    for case in CASES:
        if case.id == case_id:
            return case
    raise ConfigError(f"kit/corpus/cases: no case {case_id!r}; known: "
                      f"{', '.join(c.id for c in CASES)}")
