"""A team's training entry point: a few steps of a tiny model, to show the layer works."""

import torch
from tqdm import tqdm

model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x, y = torch.randn(256, 16), torch.randn(256, 1)
for _ in tqdm(range(20), desc="train"):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.4f}")
