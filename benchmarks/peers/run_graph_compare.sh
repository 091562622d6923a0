#!/usr/bin/env bash
# GIN graph-classification throughput, ours against PyG, DGL and Jraph (compare.py --only graph).
#
# Run it on a quiet machine (nothing else running: the load average before it
# starts should be near 0), from the repository root:
#
#   PEERS=DIR bash benchmarks/peers/run_graph_compare.sh
#
# DIR holds the three peers' virtual environments (DIR/pyg, DIR/dgl, DIR/jraph;
# benchmarks/README.md says how to make them); missing ones are made here
# (pip, from PyPI: DGL's torch 2.2.1 is several GB). DATA is the data root with
# tu/MUTAG (default ../shared/data); OUT the result file (default
# benchmarks/results/peers-graph-<date>.json); PYTHON the interpreter that has
# sparsegcn (default: python). ROUNDS and PER_ROUND as compare.py's options
# (default 7 and 3: about 10 minutes on 2 cores). Extra arguments go to compare.py.
set -euo pipefail

PEERS=${PEERS:?set PEERS to the folder of the peers environments (DIR/pyg, DIR/dgl, DIR/jraph)}
DATA=${DATA:-../shared/data}
PYTHON=${PYTHON:-python}
ROUNDS=${ROUNDS:-7}
PER_ROUND=${PER_ROUND:-3}
OUT=${OUT:-benchmarks/results/peers-graph-$(date -u +%Y%m%d-%H%M%S).json}

if [ -e "$OUT" ]; then
    echo "error: $OUT exists; choose another OUT" >&2
    exit 2
fi
mkdir -p "$PEERS"
if [ ! -x "$PEERS/pyg/bin/python" ]; then
    python3 -m venv "$PEERS/pyg"
    "$PEERS/pyg/bin/pip" install torch==2.13.0 torch_geometric numpy
fi
if [ ! -x "$PEERS/dgl/bin/python" ]; then
    python3 -m venv "$PEERS/dgl"
    "$PEERS/dgl/bin/pip" install torch==2.2.1 'numpy<2' torchdata==0.7.1 pandas dgl==2.1.0 \
        pydantic pyyaml requests psutil scipy tqdm
fi
if [ ! -x "$PEERS/jraph/bin/python" ]; then
    python3 -m venv "$PEERS/jraph"
    "$PEERS/jraph/bin/pip" install jax==0.10.2 jaxlib==0.10.2 jraph==0.0.6.dev0 dm-haiku==0.0.17 optax
fi

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PYTHON" benchmarks/peers/compare.py --only graph \
    --rounds "$ROUNDS" --per-round "$PER_ROUND" \
    --graph-root "$DATA" \
    --pyg-python "$PEERS/pyg/bin/python" \
    --dgl-python "$PEERS/dgl/bin/python" \
    --jraph-python "$PEERS/jraph/bin/python" \
    --json "$OUT" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrote $OUT"
