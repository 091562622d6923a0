#!/usr/bin/env bash
# The accelerator figures of benchmarks/README.md, in one run of about six minutes.
#
#   OUT=DIR bash benchmarks/gpu_suite.sh
#   OUT=DIR PARTS="formats lowering steps" bash benchmarks/gpu_suite.sh
#
# Run from the repository root on a machine whose python3 has jax with CUDA,
# torch with CUDA and torch_geometric (the peers), scipy, optax, tqdm and
# matplotlib. The package runs from the checkout (PYTHONPATH); Cora is read
# from datasets/planetoid/ (copy ../shared/data/planetoid there first).
#
# Parts (all by default; PARTS picks some): env, bench-random, bench-sbm,
# peers, multiseed, sage-cora, sage-epoch, papers100M, and the follow-ups formats
# (packed ELL / CSR / sorted edge list side by side), lowering (what the
# BCOO and BCSR products compile to) and steps (the GCN steps alone). Each
# writes at most one or two files to $OUT, plus suite.log with every command
# and its output. Each part has its own time limit, and a failing part does
# not stop the next.
set -u
OUT=${OUT:-benchmarks/results/gpu}
PY=${PYTHON:-python3}
PARTS=${PARTS:-env bench-random bench-sbm peers multiseed sage-cora sage-epoch papers100M}
# papers100M part: synthetic:papers100M at this scale (1 = the full 111M nodes,
# whose generation alone takes over an hour on 2 cores and needs ~45 GB of
# disk, more than a 15-minute loan of a device: run it with P100M_SCALE=1 only on
# a machine of your own), float16 features, then one full SAGE epoch each with
# the features on the device, in host RAM and memory-mapped.
P100M_SCALE=${P100M_SCALE:-0.05}
P100M_DIR=${P100M_DIR:-/tmp/sparsegcn-papers100M-$P100M_SCALE}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# JAX and torch share the GPU in the peers run: leave torch room.
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.6}
LOG="$OUT/suite.log"

part() { # part NAME SECONDS COMMAND...
  local name=$1 limit=$2 start rc
  shift 2
  case " $PARTS " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name (limit ${limit}s): $*" | tee -a "$LOG"
  start=$(date +%s)
  timeout "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  echo "== $name: rc=$rc, $(($(date +%s) - start)) s" | tee -a "$LOG"
}

part env 60 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv; \
  $PY -c 'import jax, torch, sys; print(sys.version); print(\"jax\", jax.__version__, jax.devices()); print(\"torch\", torch.__version__, torch.cuda.is_available())'; \
  $PY -c 'import torch_geometric; print(\"torch_geometric\", torch_geometric.__version__)'"

# Propagation, every backend, random graphs: time, GB/s and % of the streaming bound.
part bench-random 200 "$PY" -m sparsegcn bench --graphs random --nodes 10000,100000,1000000 \
  --degrees 10 --features 64,256 --passes fwd,fwd_bwd --repeats 20 \
  --backends dense,segment,segment-unpacked,bcoo,segment-bf16,segment-sorted --no-progress \
  --json "$OUT/bench-h200-random.json" --plot "$OUT/bench-h200-random.png"

# Community-structured graph, with and without RCM reordering.
part bench-sbm 150 "$PY" -m sparsegcn bench --graphs sbm --nodes 1000000 --degrees 10 \
  --features 64 --passes fwd,fwd_bwd --repeats 20 --reorders none,rcm \
  --backends segment,segment-unpacked,bcoo --no-progress --json "$OUT/bench-h200-sbm.json"

# Peers on the same GPU, same graphs, same process: torch.sparse CSR, PyG; GCN steps.
part peers 200 "$PY" benchmarks/peers/compare.py --torch-device cuda --nodes 1000000 \
  --repeats 20 --json "$OUT/peers-h200.json"

# Ten seeds in one program against one seed (issue 7's GPU criterion).
part multiseed 120 "$PY" benchmarks/multiseed.py --dataset cora --root datasets --seeds 10 \
  --out "$OUT"

# GraphSAGE with on-device sampling: Cora accuracy and step, and an arxiv-sized epoch.
part sage-cora 90 "$PY" -m sparsegcn train --dataset cora --root datasets --model sage \
  --fanouts 25,10 --seeds 10 --json "$OUT/sage-cora-h200.json"
part sage-epoch 120 "$PY" benchmarks/sage_products_epoch.py --dataset synthetic:arxiv \
  --root /tmp/sparsegcn-data --out "$OUT/sage-epoch-arxiv-h200.json"

# ogbn-papers100M-sized training: generated to disk, then features on the
# device, in host RAM and memory-mapped (the graph on the device; it fits).
part papers100M 420 bash -c "[ -f '$P100M_DIR/manifest.json' ] || \
  $PY -m sparsegcn.datasets.synthetic_disk papers100M --scale $P100M_SCALE \
    --features-dtype float16 --out '$P100M_DIR' --no-progress || exit 1; \
  for where in device host mmap; do \
    $PY -m sparsegcn train --dataset '$P100M_DIR' --model sage --fanouts 15,10,5 \
      --batch-size 1024 --epochs 1 --graph-on device --features-on \$where \
      --no-progress \
      --json '$OUT/papers100M-$P100M_SCALE-features-'\$where'.json'; \
  done"

# Follow-ups: the layouts side by side, the sparse lowerings, the GCN steps alone.
part formats 150 "$PY" -m sparsegcn bench --graphs random,sbm --nodes 1000000 --degrees 10 \
  --features 64,256 --passes fwd,fwd_bwd --repeats 10 --reorders none,rcm \
  --backends segment,segment-csr,segment-sorted,bcoo --no-progress \
  --json "$OUT/bench-h200-formats.json"
part lowering 90 "$PY" benchmarks/bcoo_lowering.py --nodes 1000000 \
  --json "$OUT/bcoo-lowering-h200.json"
part steps 120 "$PY" benchmarks/peers/compare.py --torch-device cuda --only steps \
  --step-graphs auto,ell,csr --repeats 20 --json "$OUT/peers-steps-h200.json"
echo "== done" | tee -a "$LOG"
