"""Example team tool: evaluate a causal language model's perplexity on a text file, offline.

    python evaluate.py --model /models/my-checkpoint --text eval.txt
    python evaluate.py --tiny            # a randomly initialised tiny GPT-2: checks the stack end to end
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch

SAMPLE = "The quick brown fox jumps over the lazy dog. " * 16


def load(args: argparse.Namespace) -> tuple[torch.nn.Module, list[int]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

    text = SAMPLE
    if args.text:
        with open(args.text, encoding="utf-8") as f:
            text = f.read()
    if args.tiny or not args.model:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=512,
                                                  bos_token_id=0, eos_token_id=0, loss_type="ForCausalLM"))
        ids = list(text.encode("utf-8"))[:512]  # bytes as tokens: no tokenizer download needed
        return model, ids
    tok = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True)
    return model, tok(text)["input_ids"][:1024]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a local model folder")
    parser.add_argument("--text", help="a UTF-8 text file to evaluate on")
    parser.add_argument("--tiny", action="store_true", help="use a tiny random model (no files needed)")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, ids = load(args)
    model.to(device).eval()
    start = time.monotonic()
    with torch.no_grad():
        batch = torch.tensor([ids], device=device)
        loss = model(batch, labels=batch).loss.item()
    print(json.dumps({"device": device, "tokens": len(ids), "loss": round(loss, 4),
                      "perplexity": round(math.exp(loss), 2), "seconds": round(time.monotonic() - start, 3)}))


if __name__ == "__main__":
    main()
