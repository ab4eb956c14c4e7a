#!/usr/bin/env python3
"""PyTorch weights as fedsim reads them (`model: {kind: ..., init: {from: FILE}}`), and back.

fedsim names a model's tensors by the layers that hold parameters, counted from 0 in forward
order: `K.weight`, `K.bias` (dense, convolution, normalisation), `K.weight` (embedding), and an
LSTM's own names (`K.weight_ih_l0`, ...); shapes and layouts are PyTorch's. A module whose
submodules are registered in forward order (as most are) maps by `fedsim_tensors`: the K-th
submodule that holds parameters itself becomes `K.`. Several models (FedEM's components) are
prefixed `M.`.

    # The FedEM authors' initial FemnistCNN components: torch.manual_seed(seed + m), then
    # PyTorch's default initialisation, for m = 0 .. components - 1.
    python scripts/torch_weights.py femnist-cnn --seed 1 --components 3 --classes 62 \\
        --out fedem_init.safetensors

    # A run's final models (fedsim run --save-models) loaded into PyTorch modules:
    #   from torch_weights import load_into; load_into(module, "models.safetensors", model=0)

    # Your own module as a fedsim layer list (`model:` section), and its weights, for inputs
    # of 1×28×28 (a module of a file, built by the expression after the colon):
    python scripts/torch_weights.py layers mynet.py:Net(classes=10) --input 1,28,28
    python scripts/torch_weights.py weights mynet.py:Net(classes=10) --input 1,28,28 \\
        --state-dict trained.pt --out init.safetensors

    # A module a layer list cannot say, as a TorchScript file (`model: {kind: torchscript}`):
    python scripts/torch_weights.py script mynet.py:Net(classes=10) --input 1,28,28 \\
        --state-dict trained.pt --out mynet.pt

`script` traces the module in eval mode (torch.jit.trace on a batch of two rows of zeros) and
prints its `model:` section, with the FLOPs of one row's forward pass as PyTorch's FLOP counter
(torch.utils.flop_counter) counts them: multiply-adds ×2 of convolutions and products, as fedsim
counts its own layers.

`layers` traces the module (torch.fx) and maps each step of its forward pass to a layer: Conv2d
(square kernel, stride and padding), Linear, ReLU, ReLU6, Tanh, GELU (exact), MaxPool2d(2),
AdaptiveAvgPool2d(1), Flatten (or `view`/`reshape`/`flatten` to one vector per row), Dropout,
BatchNorm2d (without running statistics), GroupNorm (gcd(channels, 32) groups), Embedding, LSTM
(batch first; fedsim passes on the last step's hidden state). A forward pass that branches (a residual `x + f(x)`) is
refused: write such blocks as `{kind: residual, layers: [...]}` by hand.

Needs torch and safetensors (`bash benches/pytorch_cnn.sh` installs both into .venv-bench).
"""
import argparse
import math
import operator
import sys

import torch
from safetensors.torch import load_file, save_file
from torch import nn
import torch.nn.functional as F


class FemnistCNN(nn.Module):
    """The FedEM authors' FemnistCNN (their models.py): fedsim's `cnn`."""

    def __init__(self, num_classes, side=28):
        super().__init__()
        # Theirs takes 28×28 images (64 · 4 · 4 features after the second pooling); `side`
        # makes the same network for smaller images.
        self.features = 64 * (((side - 4) // 2 - 4) // 2) ** 2
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(self.features, 2048)
        self.output = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, self.features)
        x = F.relu(self.fc1(x))
        return self.output(x)


class SmallCNN(nn.Module):
    """The small CNN of FedEM's App. I.1 (Keras' MNIST example): fedsim's `small_cnn`."""

    def __init__(self, num_classes, dropout=0.25, side=28):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.drop1 = nn.Dropout(dropout)
        self.fc1 = nn.Linear(64 * ((side - 4) // 2) ** 2, 128)
        self.drop2 = nn.Dropout(2 * dropout)
        self.output = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = self.drop1(x).flatten(1)
        return self.output(self.drop2(F.relu(self.fc1(x))))


def fedsim_tensors(module, prefix=""):
    """`module`'s parameters under fedsim's names (F32, contiguous), `prefix` before each."""
    out, k = {}, 0
    for _, sub in module.named_modules():
        own = list(sub.named_parameters(recurse=False))
        if not own:
            continue
        for name, p in own:
            out[f"{prefix}{k}.{name}"] = p.detach().float().contiguous().clone()
        k += 1
    return out


def load_into(module, path, model=None):
    """Loads fedsim's tensors of `path` (model `model` of several, or the only one; in
    `client_models.safetensors`, client C's model of kind K is `model="C.K"`) into `module`,
    by the same mapping as `fedsim_tensors`."""
    tensors = load_file(path)
    prefix = "" if model is None else f"{model}."
    names = fedsim_tensors(module)
    with torch.no_grad():
        params = dict(module.named_parameters())
        by_fedsim = dict(zip(names, params.values()))
        for name, p in by_fedsim.items():
            p.copy_(tensors[prefix + name])


class Unsupported(Exception):
    """A module the layer list cannot say; the message says which step and why."""


def fedsim_layers(module, input_shape):
    """`module`'s forward pass as fedsim's layer list (a list of YAML-ready items), for rows of
    `input_shape` (a tuple without the batch dimension). Raises `Unsupported` naming the step
    that has no layer."""
    import torch.fx

    tokens = any(isinstance(m, nn.Embedding) for m in module.modules())
    try:
        with torch.no_grad():
            module.eval()(torch.zeros(2, *input_shape, dtype=torch.long if tokens else None))
    except Exception as e:  # noqa: BLE001 - any failure means these rows do not fit
        raise Unsupported(f"the module does not take rows of {input_shape}: {e}") from e
    graph = torch.fx.symbolic_trace(module).graph
    modules = dict(module.named_modules())
    layers, previous = [], None

    def step_error(node, why):
        return Unsupported(f"step `{node.name}` ({node.op} {node.target}): {why}")

    def square(node, name, value):
        pair = value if isinstance(value, tuple) else (value, value)
        if pair[0] != pair[1]:
            raise step_error(node, f"{name} {value} is not square")
        return pair[0]

    for node in graph.nodes:
        if node.op == "placeholder":
            previous = node
            continue
        if node.op == "output":
            break
        inputs = [a for a in node.args if isinstance(a, torch.fx.Node)]
        if node.op == "call_function" and node.target is operator.getitem:
            # An LSTM's (output, state) picked apart: fedsim's layer passes on the last step.
            previous = node
            continue
        if inputs != [previous]:
            raise step_error(node, "the forward pass branches or reuses an earlier value "
                             "(write residual blocks by hand)")
        previous = node
        if node.op == "call_module":
            m = modules[node.target]
            if isinstance(m, nn.Conv2d):
                if m.dilation not in ((1, 1), 1) or m.padding_mode != "zeros":
                    raise step_error(node, "dilation and non-zero padding have no layer")
                layer = {"kind": "conv", "channels": m.out_channels,
                         "kernel": square(node, "kernel", m.kernel_size)}
                stride, padding = square(node, "stride", m.stride), square(node, "padding", m.padding)
                if stride != 1:
                    layer["stride"] = stride
                if padding != 0:
                    layer["padding"] = padding
                if m.groups != 1:
                    layer["groups"] = m.groups
                if m.bias is None:
                    layer["bias"] = False
                layers.append(layer)
            elif isinstance(m, nn.Linear):
                if m.bias is None:
                    raise step_error(node, "a dense layer without bias has no layer")
                layers.append({"kind": "dense", "units": m.out_features})
            elif isinstance(m, nn.ReLU):
                layers.append("relu")
            elif isinstance(m, nn.ReLU6):
                layers.append("relu6")
            elif isinstance(m, nn.Tanh):
                layers.append("tanh")
            elif isinstance(m, nn.GELU):
                if m.approximate != "none":
                    raise step_error(node, "only the exact GELU has a layer (approximate='none')")
                layers.append("gelu")
            elif isinstance(m, nn.MaxPool2d):
                if square(node, "kernel", m.kernel_size) != 2 or square(node, "stride", m.stride) != 2 \
                        or m.padding not in (0, (0, 0)) or m.dilation not in (1, (1, 1)):
                    raise step_error(node, "only 2×2 max pooling with stride 2 has a layer")
                layers.append("max_pool")
            elif isinstance(m, nn.AdaptiveAvgPool2d):
                if m.output_size not in (1, (1, 1)):
                    raise step_error(node, "only pooling to 1×1 has a layer")
                layers.append("global_avg_pool")
            elif isinstance(m, nn.Flatten):
                layers.append("flatten")
            elif isinstance(m, nn.Dropout):
                layers.append({"kind": "dropout", "rate": m.p})
            elif isinstance(m, nn.BatchNorm2d):
                if m.track_running_stats or not m.affine:
                    raise step_error(node, "fedsim's batch norm keeps no running statistics and "
                                     "is affine (track_running_stats=False, affine=True)")
                layers.append("batch_norm")
            elif isinstance(m, nn.GroupNorm):
                if m.num_groups != math.gcd(m.num_channels, 32) or not m.affine:
                    raise step_error(node, f"fedsim's group norm has gcd(channels, 32) = "
                                     f"{math.gcd(m.num_channels, 32)} groups and is affine")
                layers.append("group_norm")
            elif isinstance(m, nn.Embedding):
                layers.append({"kind": "embedding", "dim": m.embedding_dim})
            elif isinstance(m, nn.LSTM):
                if not m.batch_first or m.bidirectional or m.proj_size:
                    raise step_error(node, "only a batch-first, one-way LSTM has a layer")
                layer = {"kind": "lstm", "hidden": m.hidden_size}
                if m.num_layers != 1:
                    layer["layers"] = m.num_layers
                layers.append(layer)
            else:
                raise step_error(node, f"{type(m).__name__} has no fedsim layer")
        elif node.op == "call_function":
            name = getattr(node.target, "__name__", str(node.target))
            if name in ("relu", "relu6", "tanh"):
                layers.append(name)
            elif name == "gelu" and node.kwargs.get("approximate", "none") == "none":
                layers.append("gelu")
            elif name == "max_pool2d" and node.args[1:2] == (2,) and not node.args[2:] \
                    and set(node.kwargs) <= {"stride"} and node.kwargs.get("stride", 2) in (2, None):
                layers.append("max_pool")
            elif name == "flatten" and node.args[1:] in ((), (1,)):
                layers.append("flatten")
            elif name == "dropout":
                layers.append({"kind": "dropout", "rate": node.kwargs.get("p", 0.5)})
            else:
                raise step_error(node, "this function has no fedsim layer")
        elif node.op == "call_method":
            if node.target in ("view", "reshape", "flatten"):
                layers.append("flatten")
            elif node.target in ("relu", "relu6", "tanh"):
                layers.append(node.target)
            else:
                raise step_error(node, "this method has no fedsim layer")
        else:
            raise step_error(node, "unexpected step")
    if not layers or not (isinstance(layers[-1], dict) and layers[-1].get("kind") == "dense"):
        raise Unsupported("the last step must be a Linear layer (one output per class)")
    del layers[-1]["units"]
    if layers[-1] == {"kind": "dense"}:
        layers[-1] = "dense"
    return layers


def flow(value):
    """`value` as YAML flow text (a layer, or the list of them)."""
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def model_section(layers):
    """The `model:` section of a scenario for `layers`, one layer a line."""
    lines = ["model:", "  kind: layers", "  layers:"]
    lines += [f"    - {flow(layer)}" for layer in layers]
    return "\n".join(lines) + "\n"


def traced(module, shape):
    """`module` in eval mode, traced by TorchScript on a batch of two rows of `shape`."""
    module = module.eval()
    with torch.no_grad():
        return torch.jit.trace(module, torch.zeros((2,) + tuple(shape)))


def flops_per_row(module, shape):
    """Multiply-adds ×2 of one row's forward pass, by PyTorch's FLOP counter."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        module.eval()(torch.zeros((1,) + tuple(shape)))
    return counter.get_total_flops()


def load_module(spec):
    """`FILE.py:EXPRESSION`: the module EXPRESSION builds in FILE's namespace."""
    import runpy

    path, _, expression = spec.partition(":")
    if not expression:
        raise SystemExit(f"{spec}: expected FILE.py:EXPRESSION, e.g. mynet.py:Net(classes=10)")
    namespace = runpy.run_path(path)
    return eval(expression, namespace)  # noqa: S307 - the user's own file and expression


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    cnn = commands.add_parser("femnist-cnn", help="the FedEM authors' initial FemnistCNNs")
    cnn.add_argument("--seed", type=int, default=1)
    cnn.add_argument("--components", type=int, default=1, help="models to write (M.)")
    cnn.add_argument("--classes", type=int, default=62)
    cnn.add_argument("--out", required=True)
    for name, what in [("layers", "print a module's `model:` section"),
                       ("weights", "write a module's weights under fedsim's names"),
                       ("script", "write a module as TorchScript and print its `model:` section")]:
        sub = commands.add_parser(name, help=what)
        sub.add_argument("module", help="FILE.py:EXPRESSION, e.g. mynet.py:Net(classes=10)")
        sub.add_argument("--input", required=True, help="one row's shape, e.g. 1,28,28")
        if name in ("weights", "script"):
            sub.add_argument("--state-dict", help="a torch.save'd state_dict to load first")
            sub.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.command == "femnist-cnn":
        tensors = {}
        for m in range(args.components):
            torch.manual_seed(args.seed + m)
            prefix = f"{m}." if args.components > 1 else ""
            tensors.update(fedsim_tensors(FemnistCNN(args.classes), prefix))
        save_file(tensors, args.out)
        print(f"{args.out}: {len(tensors)} tensors, {args.components} model(s)")
        return
    module = load_module(args.module)
    shape = tuple(int(d) for d in args.input.split(","))
    if args.command == "script":
        if args.state_dict:
            module.load_state_dict(torch.load(args.state_dict, map_location="cpu"))
        traced(module, shape).save(args.out)
        flops = flops_per_row(module, shape)
        print(f"model: {{kind: torchscript, path: {args.out}, flops: {flops}}}")
        return
    try:
        layers = fedsim_layers(module, shape)
    except Unsupported as e:
        sys.exit(f"{args.module}: {e}")
    if args.command == "layers":
        print(model_section(layers), end="")
        return
    if args.state_dict:
        module.load_state_dict(torch.load(args.state_dict, map_location="cpu"))
    tensors = fedsim_tensors(module)
    save_file(tensors, args.out)
    print(f"{args.out}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
