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
- ``gin_epoch``: one epoch of graph classification a call (the data is a
  ``graph_data`` ``.npz``): the training graphs shuffled, packed on the host
  by ``jraph.dynamically_batch`` (``batch_np`` + ``pad_with_graphs``) under
  the node, edge and graph budgets of ``spec["budget"]`` (``graph_compare``
  passes a random batch's, ``choose_budget``: jraph packs random orders),
  and a jitted Adam step per batch on Xu et al.'s GIN-0 (see
  :func:`_gin_apply`). ``stats``: batches and graphs of the last epoch.
- ``gin_epoch_prebatched``: the same, with the batches packed once in setup
  and kept on the device; an epoch steps through them in a new order, so
  only the compiled steps are timed.
- ``gin_forward``: every graph's class scores as one padded batch, in
  training mode with no dropout and the weights of ``spec["weights"]``.

Every call is a jitted step (for ``gin_*``, a whole epoch of them) followed
by ``block_until_ready``; the state is carried from call to call, as in
training.
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


def _gin_init(key, in_features: int, hidden: int, num_classes: int, num_layers: int) -> dict:
    """Parameters in ``graph_data.gin_weights``' layout, PyTorch's default init."""
    import jax
    import jax.numpy as jnp

    def linear(key, n_in, n_out):
        bound = 1.0 / np.sqrt(n_in)
        k_w, k_b = jax.random.split(key)
        w = jax.random.uniform(k_w, (n_in, n_out), jnp.float32, -bound, bound)
        return w, jax.random.uniform(k_b, (n_out,), jnp.float32, -bound, bound)

    widths = [in_features] + [hidden] * (num_layers - 1)
    keys = iter(jax.random.split(key, 3 * num_layers))
    params = {}
    for k in range(1, num_layers):
        params[f"w1_{k}"], params[f"b1_{k}"] = linear(next(keys), widths[k - 1], hidden)
        params[f"w2_{k}"], params[f"b2_{k}"] = linear(next(keys), hidden, hidden)
        for norm in ("bn1", "bn"):
            params[f"{norm}_scale_{k}"] = jnp.ones((hidden,), jnp.float32)
            params[f"{norm}_bias_{k}"] = jnp.zeros((hidden,), jnp.float32)
    for k in range(num_layers):
        params[f"head_w_{k}"], params[f"head_b_{k}"] = linear(next(keys), widths[k], num_classes)
    return params


def _gin_apply(params, stats, graph, *, num_layers, dropout, training, key=None):
    """Xu et al.'s GIN-0 on a padded ``GraphsTuple``: ``(scores [G_b, C], stats)``.

    Neighbour sums are ``jraph.GraphConvolution`` with the identity update and
    no normalization; readouts ``jraph.segment_sum`` over each node's graph;
    batch norm takes its statistics over real nodes (``get_node_padding_mask``)
    and keeps running ones (momentum 0.1) in ``stats``.
    """
    import jax
    import jax.numpy as jnp
    import jraph

    node_mask = jraph.get_node_padding_mask(graph)
    n_graph = graph.n_node.shape[0]
    total = graph.nodes.shape[0]
    node_graph = jnp.repeat(jnp.arange(n_graph), graph.n_node, total_repeat_length=total)
    neighbours = jraph.GraphConvolution(
        update_node_fn=lambda h: h, add_self_edges=False, symmetric_normalization=False
    )

    def norm(name, k, h, stats):
        if training:
            w = node_mask.astype(h.dtype)[:, None]
            count = jnp.maximum(w.sum(), 1.0)
            mean = (w * h).sum(0) / count
            var = (w * (h - mean) ** 2).sum(0) / count
            unbiased = var * count / jnp.maximum(count - 1.0, 1.0)
            stats = {
                **stats,
                f"{name}_mean_{k}": 0.9 * stats[f"{name}_mean_{k}"] + 0.1 * mean,
                f"{name}_var_{k}": 0.9 * stats[f"{name}_var_{k}"] + 0.1 * unbiased,
            }
        else:
            mean, var = stats[f"{name}_mean_{k}"], stats[f"{name}_var_{k}"]
        out = (h - mean) * jax.lax.rsqrt(var + 1e-5)
        return out * params[f"{name}_scale_{k}"] + params[f"{name}_bias_{k}"], stats

    keys = jax.random.split(key, num_layers) if training and dropout > 0 else [None] * num_layers

    def score(k, h):
        pooled = jraph.segment_sum(h, node_graph, n_graph)
        s = pooled @ params[f"head_w_{k}"] + params[f"head_b_{k}"]
        if keys[k] is not None:
            keep = jax.random.bernoulli(keys[k], 1.0 - dropout, s.shape)
            s = jnp.where(keep, s / (1.0 - dropout), 0.0)
        return s

    h = graph.nodes
    scores = score(0, h)
    for k in range(1, num_layers):
        u = h + neighbours(graph._replace(nodes=h)).nodes
        u = u @ params[f"w1_{k}"] + params[f"b1_{k}"]
        u, stats = norm("bn1", k, u, stats)
        u = jax.nn.relu(u) @ params[f"w2_{k}"] + params[f"b2_{k}"]
        u, stats = norm("bn", k, u, stats)
        h = jax.nn.relu(u)
        scores = scores + score(k, h)
    return scores, stats


def _gin_stats(hidden: int, num_layers: int) -> dict:
    import jax.numpy as jnp

    stats = {}
    for k in range(1, num_layers):
        for name in ("bn1", "bn"):
            stats[f"{name}_mean_{k}"] = jnp.zeros((hidden,), jnp.float32)
            stats[f"{name}_var_{k}"] = jnp.ones((hidden,), jnp.float32)
    return stats


def _graphs_tuples(data) -> list:
    """Each graph of a ``graph_data`` ``.npz`` as a NumPy ``GraphsTuple``
    (its label in ``globals``)."""
    import jraph
    from graph_data import graph_list

    return [
        jraph.GraphsTuple(
            nodes=x,
            edges=None,
            senders=senders.astype(np.int32),
            receivers=receivers.astype(np.int32),
            n_node=np.array([x.shape[0]]),
            n_edge=np.array([senders.shape[0]]),
            globals=np.array([label], np.int32),
        )
        for senders, receivers, x, label in graph_list(data)
    ]


def _gin_training(spec: dict):
    """The GIN's state, its jitted Adam step, and the training graphs."""
    import jax
    import jax.numpy as jnp
    import jraph
    import optax

    data = np.load(spec["data"])
    graphs = _graphs_tuples(data)
    train = [graphs[i] for i in data["train"]]
    layers, dropout = spec["num_layers"], spec["dropout"]
    params = _gin_init(
        jax.random.key(0),
        int(data["features"].shape[1]),
        spec["hidden"],
        int(data["num_classes"]),
        layers,
    )
    tx = optax.adam(spec["lr"])

    def loss_fn(params, stats, batch, key):
        scores, stats = _gin_apply(
            params, stats, batch, num_layers=layers, dropout=dropout, training=True, key=key
        )
        mask = jraph.get_graph_padding_mask(batch)
        losses = optax.softmax_cross_entropy_with_integer_labels(scores, batch.globals)
        return jnp.sum(jnp.where(mask, losses, 0.0)) / jnp.maximum(mask.sum(), 1), stats

    @jax.jit
    def step(params, stats, opt_state, key, batch):
        key, dropout_key = jax.random.split(key)
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, stats, batch, dropout_key
        )
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state, key, loss

    state = [params, _gin_stats(spec["hidden"], layers), tx.init(params), jax.random.key(1)]
    return state, step, train


def _pack(graphs: list, budget: dict):
    """``(padded batch, real graphs in it)`` pairs, packed by ``dynamically_batch``."""
    import jraph

    for batch in jraph.dynamically_batch(
        iter(graphs), n_node=budget["nodes"], n_edge=budget["edges"], n_graph=budget["graphs"]
    ):
        # pad_with_graphs' first padding graph owns the padding nodes; the rest are empty.
        padding = int(np.argmin(batch.n_node[::-1] == 0)) + 1
        yield batch, batch.n_node.shape[0] - padding


def _epoch(state, step, batches, stats: dict):
    import jax

    count = graphs = 0
    loss = None
    for batch, real in batches:
        *new, loss = step(*state, batch)
        state[:] = new
        count += 1
        graphs += real
    stats["batches"], stats["graphs"] = count, graphs
    return jax.block_until_ready(loss)


def gin_epoch(spec: dict):
    state, step, train = _gin_training(spec)
    rng = np.random.default_rng(0)
    stats: dict = {}

    def run():
        order = rng.permutation(len(train))
        return _epoch(state, step, _pack([train[i] for i in order], spec["budget"]), stats)

    return run, stats


def gin_epoch_prebatched(spec: dict):
    import jax

    state, step, train = _gin_training(spec)
    rng = np.random.default_rng(0)
    batches = [(jax.device_put(b), real) for b, real in _pack(train, spec["budget"])]
    stats: dict = {}

    def run():
        order = rng.permutation(len(batches))
        return _epoch(state, step, (batches[i] for i in order), stats)

    return run, stats


def gin_forward(spec: dict):
    import jax
    import jraph

    data = np.load(spec["data"])
    batched = jraph.batch_np(_graphs_tuples(data))
    nodes, edges = int(batched.n_node.sum()), int(batched.n_edge.sum())
    padded = jraph.pad_with_graphs(batched, nodes + 1, edges, batched.n_node.shape[0] + 1)
    weights = np.load(spec["weights"])
    params = {name: jax.numpy.asarray(weights[name]) for name in weights.files}
    stats = _gin_stats(spec["hidden"], spec["num_layers"])
    forward = jax.jit(
        lambda params, graph: _gin_apply(
            params, stats, graph, num_layers=spec["num_layers"], dropout=0.0, training=True
        )[0]
    )
    graphs = int(batched.n_node.shape[0])

    def run():
        return np.asarray(forward(params, padded))[:graphs]

    return run, {}


if __name__ == "__main__":
    raise SystemExit(
        serve(
            {
                "propagate": propagate,
                "gcn_step": gcn_step,
                "gat_step": gat_step,
                "gin_epoch": gin_epoch,
                "gin_epoch_prebatched": gin_epoch_prebatched,
                "gin_forward": gin_forward,
            },
            versions,
        )
    )
