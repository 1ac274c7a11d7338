"""A team's own GPU check: one bf16 training step of a small MLP on every visible GPU."""

import torch

assert torch.cuda.is_available(), "no GPU visible"
for i in range(torch.cuda.device_count()):
    dev = torch.device("cuda", i)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(model.parameters())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(torch.randn(64, 1024, device=dev)).float().pow(2).mean()
    loss.backward()
    opt.step()
    print(f"cuda:{i} {torch.cuda.get_device_name(i)} loss {loss.item():.4f}")
