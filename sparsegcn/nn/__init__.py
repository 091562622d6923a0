"""Layers and models: pure functions over plain params pytrees, behind one registry."""

from sparsegcn.nn.appnp import appnp, appnp_propagate
from sparsegcn.nn.conv import gcn_conv, gcn_project, gcn_propagate, propagate_view
from sparsegcn.nn.dropout import dropout, hash_bits, keep_mask
from sparsegcn.nn.gat import gat, gat_conv, gat_project, gatv2
from sparsegcn.nn.gcn import gcn
from sparsegcn.nn.gcnii import gcnii, gcnii_conv
from sparsegcn.nn.gin import gin, gin_conv, gine_conv
from sparsegcn.nn.initializers import glorot_uniform, linear_params
from sparsegcn.nn.jk import jk, jk_net, jumping_knowledge
from sparsegcn.nn.mlp import mlp
from sparsegcn.nn.model import Model
from sparsegcn.nn.registry import MODELS, PREPARATIONS, ModelSpec, create_model, get_model_spec
from sparsegcn.nn.sage import sage, sage_conv, sage_project, sage_propagate
from sparsegcn.nn.sgc import sgc, sgc_features
from sparsegcn.nn.stack import layer_outputs, run_layers

__all__ = [
    "MODELS",
    "PREPARATIONS",
    "Model",
    "ModelSpec",
    "appnp",
    "appnp_propagate",
    "create_model",
    "dropout",
    "gat",
    "gat_conv",
    "gat_project",
    "gatv2",
    "gcn",
    "gcn_conv",
    "gcn_project",
    "gcn_propagate",
    "gcnii",
    "gcnii_conv",
    "get_model_spec",
    "gin",
    "gin_conv",
    "gine_conv",
    "glorot_uniform",
    "hash_bits",
    "jk",
    "jk_net",
    "jumping_knowledge",
    "keep_mask",
    "layer_outputs",
    "linear_params",
    "mlp",
    "propagate_view",
    "run_layers",
    "sage",
    "sage_conv",
    "sage_project",
    "sage_propagate",
    "sgc",
    "sgc_features",
]
