"""Layers and models: pure functions over plain params pytrees, behind one registry."""

from sparsegcn.nn.conv import gcn_conv, gcn_project, gcn_propagate, propagate_view
from sparsegcn.nn.dropout import dropout, hash_bits, keep_mask
from sparsegcn.nn.gat import gat, gat_conv, gat_project, gatv2
from sparsegcn.nn.gcn import gcn
from sparsegcn.nn.initializers import glorot_uniform, linear_params
from sparsegcn.nn.mlp import mlp
from sparsegcn.nn.model import Model
from sparsegcn.nn.registry import MODELS, PREPARATIONS, ModelSpec, create_model, get_model_spec
from sparsegcn.nn.sage import sage, sage_conv, sage_project, sage_propagate
from sparsegcn.nn.stack import run_layers

__all__ = [
    "MODELS",
    "PREPARATIONS",
    "Model",
    "ModelSpec",
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
    "get_model_spec",
    "glorot_uniform",
    "hash_bits",
    "keep_mask",
    "linear_params",
    "mlp",
    "propagate_view",
    "run_layers",
    "sage",
    "sage_conv",
    "sage_project",
    "sage_propagate",
]
