"""Layers and models: pure functions over plain params pytrees."""

from sparsegcn.nn.appnp import appnp, appnp_propagate
from sparsegcn.nn.conv import gcn_conv
from sparsegcn.nn.dropout import dropout, hash_bits, keep_mask
from sparsegcn.nn.gcn import gcn
from sparsegcn.nn.gcnii import gcnii, gcnii_conv
from sparsegcn.nn.gin import gin, gin_conv, gine_conv
from sparsegcn.nn.initializers import glorot_uniform, linear_params
from sparsegcn.nn.jk import jk, jumping_knowledge
from sparsegcn.nn.mlp import mlp
from sparsegcn.nn.model import Model, stack_layers
from sparsegcn.nn.sage import masked_mean, sage, sage_conv, sage_conv_chunked
from sparsegcn.nn.sgc import sgc, sgc_features

__all__ = [
    "Model",
    "appnp",
    "appnp_propagate",
    "dropout",
    "gcn",
    "gcn_conv",
    "gcnii",
    "gcnii_conv",
    "gin",
    "gin_conv",
    "gine_conv",
    "glorot_uniform",
    "hash_bits",
    "jk",
    "jumping_knowledge",
    "keep_mask",
    "linear_params",
    "masked_mean",
    "mlp",
    "sage",
    "sage_conv",
    "sage_conv_chunked",
    "sgc",
    "sgc_features",
    "stack_layers",
]
