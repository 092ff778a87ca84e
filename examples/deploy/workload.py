"""The demo workload of walk.sh: a few built-in ops on a GPU; saves the results to the file named by
argv[1] and prints kjit's compile count (0 when every kernel came from the cache)."""

import sys

import torch

import kjit

torch.manual_seed(0)
x32 = torch.randn(4097, device="cuda")
x16 = torch.randn(1000, device="cuda", dtype=torch.float16)
img_small = torch.randint(0, 256, (7, 13, 3), device="cuda", dtype=torch.uint8)
img_large = torch.randint(0, 256, (2, 480, 640, 3), device="cuda", dtype=torch.uint8)
results = {
    "add_constant_f32": kjit.ops.add_constant(x32, 1.5),
    "add_constant_f16": kjit.ops.add_constant(x16, -2.0),
    "gray_small": kjit.ops.rgb_to_gray(img_small),
    "gray_large": kjit.ops.rgb_to_gray(img_large),
}
torch.cuda.synchronize()
torch.save({k: v.cpu() for k, v in results.items()}, sys.argv[1])
print("compiles:", kjit.stats()["compiles"])
