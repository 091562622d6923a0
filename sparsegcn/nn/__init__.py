"""Layers and models: pure functions over plain params pytrees, behind one registry."""

from sparsegcn.nn.appnp import appnp, appnp_propagate
from sparsegcn.nn.conv import gcn_conv, gcn_project, gcn_propagate, propagate_view
from sparsegcn.nn.dropout import dropout, hash_bits, keep_mask
from sparsegcn.nn.encoders import atom_encoder_params, bond_encoder_params, encode
from sparsegcn.nn.gat import gat, gat_conv, gat_project, gatv2
from sparsegcn.nn.gcn import gcn
from sparsegcn.nn.gcnii import gcnii, gcnii_conv
from sparsegcn.nn.gin import gin, gin_conv, gine_conv
from sparsegcn.nn.graph_gin import GRAPH_STYLES, build_graph_model, graph_gin
from sparsegcn.nn.graph_model import GRAPH_READOUTS, GraphModel, masked_batch_norm
from sparsegcn.nn.graph_ogb import gine_aggregate, graph_ogb
from sparsegcn.nn.initializers import glorot_uniform, linear_params
from sparsegcn.nn.jk import jk, jk_net, jumping_knowledge
from sparsegcn.nn.mlp import mlp
from sparsegcn.nn.model import Model
from sparsegcn.nn.readout import set2set, set2set_params
from sparsegcn.nn.registry import MODELS, PREPARATIONS, ModelSpec, create_model, get_model_spec
from sparsegcn.nn.sage import sage, sage_conv, sage_project, sage_propagate
from sparsegcn.nn.sgc import sgc, sgc_features
from sparsegcn.nn.stack import layer_outputs, run_layers

__all__ = [
    "GRAPH_READOUTS",
    "GRAPH_STYLES",
    "MODELS",
    "PREPARATIONS",
    "GraphModel",
    "Model",
    "ModelSpec",
    "appnp",
    "appnp_propagate",
    "atom_encoder_params",
    "bond_encoder_params",
    "build_graph_model",
    "create_model",
    "dropout",
    "encode",
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
    "gine_aggregate",
    "gine_conv",
    "glorot_uniform",
    "graph_gin",
    "graph_ogb",
    "hash_bits",
    "jk",
    "jk_net",
    "jumping_knowledge",
    "keep_mask",
    "layer_outputs",
    "linear_params",
    "masked_batch_norm",
    "mlp",
    "propagate_view",
    "run_layers",
    "sage",
    "sage_conv",
    "sage_project",
    "sage_propagate",
    "set2set",
    "set2set_params",
    "sgc",
    "sgc_features",
]
