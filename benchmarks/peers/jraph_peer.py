"""Jraph's side of ``compare.py``: run under a Python that has jraph and haiku.

    $JRAPH_PYTHON benchmarks/peers/jraph_peer.py   # speaks peer_protocol

Made for ``jraph==0.0.6.dev0``, ``dm-haiku==0.0.17`` and ``jax==0.10.2``
(its own virtual environment; see benchmarks/README.md). Cases:

- ``propagate``: ``jraph.GraphConvolution`` with the identity update and
  symmetric normalization on ``Â``'s structure (self-loops included), i.e.
  ``D^-1/2 (A + I) D^-1/2 x`` with the degrees counted inside the jitted call.
- ``gcn_step``: Kipf & Welling's GCN (dropout before each
  ``GraphConvolution(hk.Linear)``, ReLU between, self-edges added by jraph),
  masked cross-entropy, Adam with L2 weight decay on the first layer.
- ``gat_step``: Veličković et al.'s GAT with ``jraph.GAT`` (8 heads of 8,
  ELU, one averaged output head), self-loops added to the graph, Adam with
  L2 weight decay on every parameter. jraph's GAT has no hook for dropout
  on the attention weights, so only the features are dropped.

Every call is a jitted step followed by ``block_until_ready``; the state is
carried from call to call, as in training.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer_protocol import serve


def versions() -> dict:
    import haiku
    import jax
    import jraph

    return {
        "jraph": getattr(jraph, "__version__", "unknown"),
        "dm-haiku": haiku.__version__,
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "python": sys.version.split()[0],
    }


def _graph(senders, receivers, num_nodes, nodes):
    import jax.numpy as jnp
    import jraph

    return jraph.GraphsTuple(
        nodes=nodes,
        edges=None,
        senders=jnp.asarray(senders, jnp.int32),
        receivers=jnp.asarray(receivers, jnp.int32),
        n_node=jnp.asarray([num_nodes]),
        n_edge=jnp.asarray([len(senders)]),
        globals=None,
    )


def propagate(spec: dict):
    import jax
    import jraph

    data = np.load(spec["data"])
    x = jax.device_put(np.asarray(data["x"], np.float32))
    graph = _graph(data["senders"], data["receivers"], int(data["num_nodes"]), x)
    conv = jraph.GraphConvolution(
        update_node_fn=lambda n: n, add_self_edges=False, symmetric_normalization=True
    )
    step = jax.jit(lambda g: conv(g).nodes)
    return (lambda: jax.block_until_ready(step(graph))), {}


def _train(spec: dict, forward, decay_first_only: bool):
    """A jitted Adam step of the haiku model ``forward(graph, training)``
    on the ``.npz``'s graph, features, labels and train mask."""
    import haiku as hk
    import jax
    import jax.numpy as jnp
    import optax

    data = np.load(spec["data"])
    n = int(data["num_nodes"])
    senders, receivers = data["senders"], data["receivers"]
    if spec.get("self_loops"):
        loops = np.arange(n, dtype=senders.dtype)
        senders, receivers = np.concatenate([senders, loops]), np.concatenate([receivers, loops])
    graph = jax.device_put(_graph(senders, receivers, n, np.asarray(data["features"], np.float32)))
    labels = jnp.asarray(data["labels"], jnp.int32)
    mask = jnp.asarray(data["train_mask"], bool)
    model = hk.transform(forward)
    params = model.init(jax.random.key(0), graph, True)
    if decay_first_only:
        first = sorted(params)[0]
        decay_mask = {m: {k: m == first for k in p} for m, p in params.items()}
    else:
        decay_mask = None
    tx = optax.chain(
        optax.add_decayed_weights(spec["weight_decay"], mask=decay_mask),
        optax.adam(spec["lr"]),
    )
    opt_state = tx.init(params)

    def loss_fn(params, key):
        logits = model.apply(params, key, graph, True)
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return jnp.sum(jnp.where(mask, losses, 0.0)) / jnp.sum(mask)

    @jax.jit
    def step(params, opt_state, key):
        key, dropout_key = jax.random.split(key)
        loss, grads = jax.value_and_grad(loss_fn)(params, dropout_key)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, key, loss

    state = [params, opt_state, jax.random.key(1)]

    def run():
        *new, loss = jax.block_until_ready(step(*state))
        state[:] = new
        return loss

    return run, {"params": int(sum(p.size for p in jax.tree.leaves(params)))}


def gcn_step(spec: dict):
    import haiku as hk
    import jax
    import jraph

    hidden, layers, rate = spec["hidden"], spec["num_layers"], spec["dropout"]
    sizes = [hidden] * (layers - 1) + [spec["num_classes"]]

    def forward(graph, training):
        nodes = graph.nodes
        for i, size in enumerate(sizes):
            if training:
                nodes = hk.dropout(hk.next_rng_key(), rate, nodes)
            conv = jraph.GraphConvolution(
                update_node_fn=hk.Linear(size, name=f"layer{i}"), add_self_edges=True
            )
            nodes = conv(graph._replace(nodes=nodes)).nodes
            if i < len(sizes) - 1:
                nodes = jax.nn.relu(nodes)
        return nodes

    return _train(spec, forward, decay_first_only=True)


def gat_step(spec: dict):
    import haiku as hk
    import jax
    import jax.numpy as jnp
    import jraph

    hidden, heads, rate = spec["hidden"], spec["heads"], spec["dropout"]

    def layer(name, n_heads, width, update):
        def query(nodes):
            projected = hk.Linear(n_heads * width, with_bias=False, name=f"{name}_w")(nodes)
            return projected.reshape(nodes.shape[0], n_heads, width)

        def logits(sent, received, edges):
            init = hk.initializers.VarianceScaling(1.0, "fan_avg", "uniform")
            a_src = hk.get_parameter(f"{name}_a_src", [n_heads, width], init=init)
            a_dst = hk.get_parameter(f"{name}_a_dst", [n_heads, width], init=init)
            score = jnp.sum(sent * a_src, -1) + jnp.sum(received * a_dst, -1)
            return jax.nn.leaky_relu(score, 0.2)[..., None]

        return jraph.GAT(query, logits, update)

    def forward(graph, training):
        def drop(x):
            return hk.dropout(hk.next_rng_key(), rate, x) if training else x

        def concat_elu(x):
            bias = hk.get_parameter("b1", [heads * hidden], init=jnp.zeros)
            return jax.nn.elu(x.reshape(x.shape[0], -1) + bias)

        def average(x):
            bias = hk.get_parameter("b2", [spec["num_classes"]], init=jnp.zeros)
            return jnp.mean(x, axis=1) + bias

        first = layer("gat1", heads, hidden, concat_elu)
        second = layer("gat2", 1, spec["num_classes"], average)
        nodes = first(graph._replace(nodes=drop(graph.nodes))).nodes
        return second(graph._replace(nodes=drop(nodes))).nodes

    return _train({**spec, "self_loops": True}, forward, decay_first_only=False)


if __name__ == "__main__":
    raise SystemExit(
        serve({"propagate": propagate, "gcn_step": gcn_step, "gat_step": gat_step}, versions)
    )
