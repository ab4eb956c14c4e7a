#!/usr/bin/env bash
# fedsim on a GPU node that has no Rust toolchain and no network, as on many clusters (see
# docs/src/guide/gpu.md). Where the GPU machine has a toolchain, `FEDSIM_CUDA=1 bash
# scripts/setup.sh` there is all it takes. Otherwise fedsim is built with `--features cuda` on
# a build machine (no GPU needed), packed with LibTorch 2.13's own libraries into parts small
# enough for any file transfer, copied to the node and unpacked there; the node's own CUDA
# libraries (cuBLAS, cuDNN, NCCL, ... of its PyTorch install) serve LibTorch 2.13 as well, so
# the node needs a driver and some PyTorch with CUDA, not LibTorch 2.13 itself.
#
#   bash scripts/gpu.sh pack     on the build machine: the CUDA build of fedsim, the
#                                integration tests and the kernel benchmarks (stripped),
#                                LibTorch 2.13's libraries and FEMNIST, as
#                                target/gpu/fedsim.part-NN and target/gpu/femnist.part-NN (54 MiB
#                                each at most), and the list of them in target/gpu/PARTS
#   bash scripts/gpu.sh unpack   on the node, in a checkout of the same commit with the parts
#                                copied to target/gpu/: unpacks into target/gpu/root and puts
#                                FEMNIST where the scenarios read it (../shared/data/femnist)
#   bash scripts/gpu.sh exec CMD on the node: CMD with the unpacked LibTorch and the node's
#                                CUDA libraries on LD_LIBRARY_PATH, e.g.
#                                `bash scripts/gpu.sh exec target/gpu/root/bin/fedsim run
#                                scenarios/paper/fedem_synthetic_fedem.yaml --device cuda`
#   bash scripts/gpu.sh bench DIR
#                                on the node: every figure of the GPU page in one go (its
#                                steps' time limits add up to under 10 minutes): the GPU model,
#                                results identical with 16 and 1 trainer threads, the
#                                convolution candidates, the cohort bench, and FEMNIST FedEM and
#                                FedAvg over ROUNDS=3 rounds with one evaluation (profiled: FEDSIM_PROFILE's phases, host peak
#                                memory, GPU busy sampled every second). Each step's log, exit
#                                status and seconds in DIR (steps.txt), the figures in
#                                DIR/summary.txt
#   bash scripts/gpu.sh check synthetic|femnist DIR
#                                on the node: the longer checklist of docs/src/guide/gpu.md, each
#                                step as `bench` records it. `synthetic` needs the fedsim parts
#                                only; `femnist` FEMNIST's as well (ROUNDS=1 round of the FEMNIST
#                                FedEM run by default, with FEDSIM_PROFILE's phases; again with
#                                fedsim-before where `BEFORE=FILE bash scripts/gpu.sh pack`
#                                packed one)
#
# LibTorch's CUDA library carries kernels for every GPU architecture (sm_75 ... sm_120, 310 MB
# that do not compress); `pack` keeps those of GPU_ARCH only (default 90: H100, H200; `all`
# keeps every one), zeroing the others in place (scripts/dev/keep_gpu_arch.py), and strips the
# libraries' symbol tables: three to four parts instead of seven.
#
# `pack` also works on a machine without a GPU, and `unpack`, `exec` and `bench` run there too
# (on the CPU; `bench` with DEVICE=cpu, a CPU build in target/gpu/root/bin and, say,
# SETS="data.partition.fraction=0.014": extra `--set`s for the FEMNIST runs), which is how the
# packing and the script are checked.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "gpu: $*" >&2; }
out=target/gpu
part_size=54m
libtorch=.venv/libtorch/lib
# LibTorch's libraries that fedsim loads (libtorch_cuda_linalg is loaded lazily, for
# decompositions on a GPU, which fedsim does on the CPU).
libs=(libtorch_cpu.so libtorch_cuda.so libtorch.so libtorch_global_deps.so libc10.so
  libc10_cuda.so libtorch_nvshmem.so libgomp.so.1)

# The CUDA build has its own target folder, so the CPU build here stays as it is.
export CARGO_TARGET_DIR=target/cuda

# The newest test or benchmark executable named NAME-<hash>.
newest() {
  find "$CARGO_TARGET_DIR/release/deps" -maxdepth 1 -type f -executable -name "$1-*" \
    -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2
}

pack() {
  [ -e "$libtorch/libtorch_cuda.so" ] || bash scripts/setup.sh
  say "building with --features cuda (fedsim, integration tests, kernel benchmarks)"
  # One build of every target, as scripts/setup.sh does: the tests' dev-dependencies change the
  # features of shared crates (polars among them), so the binary built alone and then the tests
  # would compile those crates twice.
  cargo build --release --locked --features cuda --all-targets
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib" "$out"
  cp "$CARGO_TARGET_DIR/release/fedsim" "$stage/bin/fedsim"
  cp "$(newest integration)" "$stage/bin/integration"
  cp "$(newest kernel)" "$stage/bin/kernel"
  # BEFORE=FILE: another CUDA build of fedsim (an older commit's), packed as fedsim-before, so
  # that `check femnist` times both on the same machine.
  [ -z "${BEFORE:-}" ] || cp "$BEFORE" "$stage/bin/fedsim-before"
  strip "$stage"/bin/*
  for lib in "${libs[@]}"; do strip --strip-unneeded -o "$stage/lib/$lib" "$libtorch/$lib"; done
  if [ "${GPU_ARCH:-90}" != all ]; then
    python3 scripts/dev/keep_gpu_arch.py "$stage/lib/libtorch_cuda.so" "$stage/lib/cuda.so" "${GPU_ARCH:-90}"
    mv "$stage/lib/cuda.so" "$stage/lib/libtorch_cuda.so"
  fi
  rm -f "$out"/*.part-* "$out/PARTS"
  say "compressing LibTorch and the binaries (a few minutes)"
  tar -C "$stage" -cf - bin lib | xz -q -T0 -6 | split -b "$part_size" -d - "$out/fedsim.part-"
  if [ -d ../shared/data/femnist ]; then
    tar -C ../shared/data -cf - femnist | split -b "$part_size" -d - "$out/femnist.part-"
  fi
  rm -rf "$stage"
  (cd "$out" && ls -1 ./*.part-* | sed 's|^\./||') > "$out/PARTS"
  say "carry each of these, one call each (target/gpu/...), then run 'bash scripts/gpu.sh unpack':"
  sed "s|^|  $out/|" "$out/PARTS" >&2
  du -ch "$out"/*.part-* | tail -1 >&2
}

unpack() {
  local root=$out/root
  rm -rf "$root" && mkdir -p "$root"
  cat "$out"/fedsim.part-* | xz -q -d -T0 | tar -C "$root" -xf -
  if [ -d ../shared/data/femnist ]; then
    say "../shared/data/femnist is there already: left as it is"
  elif ls "$out"/femnist.part-* >/dev/null 2>&1; then
    mkdir -p ../shared/data
    cat "$out"/femnist.part-* | tar -C ../shared/data -xf -
    say "FEMNIST in ../shared/data/femnist"
  fi
  say "unpacked into $root: $(ls "$root/bin" | tr '\n' ' ')"
}

# The machine's CUDA libraries: every nvidia/*/lib folder of its Python's packages.
cuda_libraries() {
  local python site
  for python in python3 /opt/torch/.venv/bin/python3 .venv/bin/python3; do
    site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null) || continue
    [ -d "$site/nvidia" ] && ls -d "$site"/nvidia/*/lib 2>/dev/null | tr '\n' ':' && return
  done
}

# Runs one step of the checklist: its output in DIR/NAME.log, its exit status and seconds in
# DIR/steps.txt; a step that fails or runs past its time does not stop the next.
step() {
  local dir=$1 name=$2 limit=$3 start rc=0
  shift 3
  start=$EPOCHREALTIME
  timeout "$limit" "$@" >"$dir/$name.log" 2>&1 || rc=$?
  echo "$name rc=$rc $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f s", b - a }')" |
    tee -a "$dir/steps.txt" >&2
}

# The GPU's utilisation and memory every second into FILE, until killed (nothing without a GPU).
gpu_samples() {
  if command -v nvidia-smi >/dev/null; then
    exec nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 1 >"$1"
  fi
  echo "timestamp, utilization.gpu [%], memory.used [MiB]" >"$1"
}

# The mean of the second column (utilization.gpu, "NN %") of an nvidia-smi sample file.
mean_busy() {
  awk -F', ' 'NR > 1 { sub(/ %/, "", $2); s += $2; n++ } END { if (n) printf "%.0f %% (%d samples)", s / n, n }' "$1"
}

# Runs one FEMNIST scenario for ROUNDS rounds with one evaluation, profiled, the GPU sampled
# every second into DIR/NAME-gpu.csv. STATE_GIB (default 32) GiB of the GPU hold the clients'
# momentum buffers and a round's updates (FEMNIST FedEM's take about 2 × 14.7 GB; the
# scenario's default of 16 GiB suits GPUs of 24 GB and more, and an 80 GB one holds all).
femnist_run() {
  local dir=$1 name=$2 limit=$3 scenario=$4 bin=$out/root/bin sampler
  gpu_samples "$dir/$name-gpu.csv" &
  sampler=$!
  step "$dir" "$name" "$limit" env FEDSIM_PROFILE=1 "$bin/fedsim" run "$scenario" --device "${DEVICE:-cuda}" -q \
    --set "rounds=${ROUNDS:-3}" --set "eval_every=${ROUNDS:-3}" ${SETS:+$(printf -- '--set %s ' $SETS)} \
    --set "training.device_state_gib=${STATE_GIB:-32}" --out "$dir/$name"
  kill "$sampler" 2>/dev/null || true
}

# FedEM synthetic on DEVICE killed with kill -9 after its first checkpoint and run again: it
# resumes, and its files equal an uninterrupted run's (`identical FILE` for each). The clients'
# momentum buffers stay on the GPU between rounds; the checkpoint carries them.
resumed_run() {
  local dir=$1 device=$2 bin=$out/root/bin pid file
  local args=(run scenarios/paper/fedem_synthetic_fedem.yaml --device "$device" -q
    --set rounds=20)
  "$bin/fedsim" "${args[@]}" --checkpoint-every off --out "$dir/whole"
  "$bin/fedsim" "${args[@]}" --checkpoint-every 1 --out "$dir/killed" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ ! -e "$dir/killed/checkpoint.fedsim" ]; do sleep 0.05; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  "$bin/fedsim" "${args[@]}" --checkpoint-every 1 --out "$dir/killed"
  for file in metrics.parquet rounds.parquet jobs.parquet clients.parquet mixtures.parquet; do
    if cmp -s "$dir/whole/$file" "$dir/killed/$file"; then echo "identical $file"; else echo "DIFFER $file"; fi
  done
}

bench() {
  local dir=${1:?a folder for the figures} bin=$out/root/bin name
  mkdir -p "$dir"
  export LD_LIBRARY_PATH="$PWD/$out/root/lib:$(cuda_libraries)${LD_LIBRARY_PATH:-}"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv >"$dir/gpu.txt" 2>/dev/null ||
    printf 'name\nno GPU (DEVICE=%s)\n' "${DEVICE:-cuda}" >"$dir/gpu.txt"
  { nproc; free -g | sed -n 2p; } >"$dir/host.txt"
  step "$dir" fedem_synthetic 60 "$bin/fedsim" run scenarios/paper/fedem_synthetic_fedem.yaml \
    --device "${DEVICE:-cuda}" -q --check-determinism --out "$dir/fedem_synthetic"
  step "$dir" conv_candidates 90 "$bin/kernel" --bench conv_candidates
  step "$dir" cnn_cohort 90 "$bin/kernel" --bench 'cnn_cohort/femnist_cnn_(100|mixture_evaluation_100)'
  femnist_run "$dir" fedem_femnist 240 scenarios/paper/fedem_femnist_fedem.yaml
  femnist_run "$dir" fedavg_femnist 100 scenarios/paper/fedem_femnist_fedavg.yaml
  {
    echo "# $(date -u +%F) $(sed -n 2p "$dir/gpu.txt"); host: $(head -1 "$dir/host.txt") cores"
    cat "$dir/steps.txt"
    echo "## determinism"
    grep -i "identical\|differ" "$dir/fedem_synthetic.log" || true
    for name in conv_candidates cnn_cohort; do
      echo "## $name (criterion: [low estimate high])"
      awk '/^(conv_candidates|cnn_cohort)\// { name = $1; getline; sub(/^ */, ""); print name ": " $0 }' \
        "$dir/$name.log" || true
    done
    for name in fedem_femnist fedavg_femnist; do
      echo "## $name, ${ROUNDS:-3} rounds and one evaluation; GPU busy $(mean_busy "$dir/$name-gpu.csv")"
      sed -n '/wall time/,/results in/p' "$dir/$name.log" | grep -v "results in" || true
    done
  } >"$dir/summary.txt"
  cat "$dir/summary.txt" >&2
}

check() {
  local what=${1:?synthetic or femnist} dir=${2:?a folder for the figures} bin=$out/root/bin
  mkdir -p "$dir"
  export LD_LIBRARY_PATH="$PWD/$out/root/lib:$(cuda_libraries)${LD_LIBRARY_PATH:-}"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv >"$dir/gpu.txt"
  case "$what" in
    synthetic)
      step "$dir" gpu_cohorts_test 180 "$bin/integration" --ignored gpu_cohorts --test-threads=1 --nocapture
      step "$dir" gpu_layer_lists_test 120 "$bin/integration" --ignored gpu_layer_lists --test-threads=1 --nocapture
      step "$dir" cnn_cohort_bench 150 "$bin/kernel" --bench 'cnn_cohort/femnist_cnn_(100|mixture_evaluation_100)'
      step "$dir" fedem_synthetic 120 "$bin/fedsim" run scenarios/paper/fedem_synthetic_fedem.yaml \
        --device cuda -q --check-determinism --out "$dir/fedem_synthetic"
      # Client-level privacy (clipping and the server's noise) on the GPU path.
      step "$dir" fedem_synthetic_private 120 "$bin/fedsim" run scenarios/paper/fedem_synthetic_fedem.yaml \
        --device cuda -q --check-determinism --set privacy.clip=1.0 --set privacy.noise_multiplier=0.5 \
        --out "$dir/fedem_synthetic_private"
      # Sample-level privacy (DP-SGD: per-record gradients of stacked copies) on the GPU path.
      step "$dir" fedem_synthetic_dp_sgd 300 "$bin/fedsim" run scenarios/paper/fedem_synthetic_fedem.yaml \
        --device cuda -q --check-determinism --set rounds=20 \
        --set 'privacy={mechanism: dp_sgd, clip: 1.0, noise_multiplier: 0.5}' \
        --out "$dir/fedem_synthetic_dp_sgd"
      # Reduced precision (training.precision): the cohort bench's stacked epoch on TF32
      # tensor cores and in bf16, and FedEM synthetic still identical with 16 and 1 threads.
      step "$dir" precision_bench 90 "$bin/kernel" --bench 'cnn_cohort/precision_'
      for precision in tf32 bf16; do
        step "$dir" "fedem_synthetic_$precision" 120 "$bin/fedsim" run scenarios/paper/fedem_synthetic_fedem.yaml \
          --device cuda -q --check-determinism --set "training.precision=$precision" \
          --out "$dir/fedem_synthetic_$precision"
      done
      # Checkpoints on the GPU path: killed and resumed, the files of an uninterrupted run.
      step "$dir" fedem_synthetic_resumed 240 resumed_run "$dir/resumed" cuda
      [ ! -x "$bin/fedsim-before" ] || step "$dir" fedem_synthetic-before 120 "$bin/fedsim-before" run \
        scenarios/paper/fedem_synthetic_fedem.yaml --device cuda -q --out "$dir/fedem_synthetic-before"
      ;;
    femnist)
      step "$dir" gpu_convolutional_test 180 "$bin/integration" --ignored gpu_convolutional --test-threads=1 --nocapture
      # The GPU's utilisation and memory every 2 s while FEMNIST runs; each run's phases
      # (FEDSIM_PROFILE) at the end of its log.
      nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 2 >"$dir/gpu-use.csv" &
      local sampler=$! run
      for run in fedsim-before fedsim; do
        [ -x "$bin/$run" ] || continue
        step "$dir" "${run/fedsim/fedem_femnist}" 200 env FEDSIM_PROFILE=1 "$bin/$run" run \
          scenarios/paper/fedem_femnist_fedem.yaml --device cuda -q --set "rounds=${ROUNDS:-1}" \
          --set "eval_every=${ROUNDS:-1}" --out "$dir/${run/fedsim/fedem_femnist}"
      done
      # The same round with TF32 tensor cores and in bf16 mixed precision (training.precision).
      for precision in tf32 bf16; do
        step "$dir" "fedem_femnist_$precision" 200 env FEDSIM_PROFILE=1 "$bin/fedsim" run \
          scenarios/paper/fedem_femnist_fedem.yaml --device cuda -q --set "rounds=${ROUNDS:-1}" \
          --set "eval_every=${ROUNDS:-1}" --set "training.precision=$precision" \
          --out "$dir/fedem_femnist_$precision"
      done
      # FedEM's round under DP-SGD: per-record gradients of FEMNIST's CNN, in parts.
      step "$dir" fedem_femnist_dp_sgd 250 env FEDSIM_PROFILE=1 "$bin/fedsim" run \
        scenarios/paper/fedem_femnist_fedem.yaml --device cuda -q --set "rounds=${ROUNDS:-1}" \
        --set "eval_every=${ROUNDS:-1}" --set 'privacy={mechanism: dp_sgd, clip: 1.0, noise_multiplier: 1.0}' \
        --out "$dir/fedem_femnist_dp_sgd"
      # One round of FedGMM's FEMNIST setting (Table 2): the time a round of the full recipe takes.
      step "$dir" fedgmm_femnist 200 env FEDSIM_PROFILE=1 "$bin/fedsim" run \
        scenarios/paper/fedgmm_femnist_fedgmm.yaml --device cuda -q --set "rounds=${ROUNDS:-1}" \
        --set "eval_every=${ROUNDS:-1}" --out "$dir/fedgmm_femnist"
      kill "$sampler"
      ;;
    *) echo "gpu: check synthetic|femnist DIR" >&2; exit 2 ;;
  esac
}

case "${1:-}" in
  pack) pack ;;
  check) shift; check "$@" ;;
  bench) shift; bench "$@" ;;
  unpack) unpack ;;
  exec)
    shift
    export LD_LIBRARY_PATH="$PWD/$out/root/lib:$(cuda_libraries)${LD_LIBRARY_PATH:-}"
    exec "$@"
    ;;
  *) sed -n '2,47p' "$0" >&2; exit 2 ;;
esac
