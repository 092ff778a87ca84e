"""compare.py A.pt B.pt: exit status 0 when both files hold identical tensors under the same names."""

import sys

import torch

a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
if a.keys() != b.keys():
    sys.exit(f"different results: {sorted(a)} vs {sorted(b)}")
for name in a:
    if not torch.equal(a[name], b[name]):
        sys.exit(f"different results for {name}")
print(f"identical results ({len(a)} tensors)")
