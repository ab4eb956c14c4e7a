#!/usr/bin/env bash
# On a GPU machine with PyTorch: checks that a libtorch_cuda.so reduced to one architecture by
# keep_gpu_arch.py still runs (a convolution with its backward pass, a matrix product, a
# softmax), with the same numbers as the machine's own PyTorch. `bash scripts/gpu.sh pack` relies
# on that reduction; run this once on a new kind of GPU machine: `bash
# scripts/dev/check_keep_gpu_arch.sh [ARCH]` (default: the GPU's own, e.g. 90).
set -uo pipefail
cd "$(dirname "$0")/../.."
for p in python3 /opt/torch/.venv/bin/python3; do "$p" -c 'import torch' 2>/dev/null && py=$p && break; done
torch=$("$py" -c 'import torch, os; print(os.path.dirname(torch.__file__))')
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
arch=${1:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}
copy=$(mktemp -d)
cp -r "$torch" "$copy/torch"
python3 scripts/dev/keep_gpu_arch.py "$torch/lib/libtorch_cuda.so" "$copy/torch/lib/libtorch_cuda.so" "$arch"
test=$(mktemp)
cat >"$test" <<'PY'
import torch
import torch.nn.functional as F
g = torch.Generator().manual_seed(0)
x = torch.randn(8, 3, 28, 28, generator=g).cuda()
w = torch.randn(16, 3, 5, 5, generator=g).cuda().requires_grad_()
loss = (F.max_pool2d(F.conv2d(x, w), 2).relu() ** 2).mean()
loss.backward()
a = torch.randn(256, 256, generator=g).cuda()
print(torch.__file__, torch.version.cuda, torch.cuda.get_device_name(0))
print(float(loss), float(w.grad.abs().sum()), float((a @ a).sum()), float(torch.softmax(a, 1).sum()))
PY
echo "the machine's PyTorch:"; "$py" "$test"
echo "its libtorch_cuda.so reduced to sm_$arch:"; PYTHONPATH=$copy "$py" "$test"
rm -rf "$copy" "$test"
