#!/usr/bin/env python3
"""There: the PyTorch reference's batched greedy decode at the full 7B shape (bf16, random weights),
timed exactly as ../shared/golden/bench_reference.py times it (1024-token prompts, generate() of 1 and
of n new tokens, per step = the difference / (n - 1)), for the batch sizes given, without that
script's encoder, prefill and end-to-end stages (minutes of device time). Prints one JSON line.
Needs bench_reference.py and make_golden.py on PYTHONPATH (scripts/device/prepare.sh copies them)."""
import argparse
import json

import torch

import bench_reference as br
import make_golden as mg


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,64,128")
    ap.add_argument("--new-tokens", type=int, default=128)
    args = ap.parse_args()
    model = mg.build_model("full", "cuda")
    gen = torch.Generator().manual_seed(0)
    res = {"gpu": torch.cuda.get_device_name(0), "attn_implementation": mg.attn_name(model),
           "new_tokens": args.new_tokens, "prompt_tokens": 1024, "decode_batch": {}}

    def gen_time(ids, new):
        am = torch.ones_like(ids)

        def g():
            model.generate(input_ids=ids, attention_mask=am, do_sample=False, max_new_tokens=new,
                           min_new_tokens=new, eos_token_id=None)

        return br.timed(g, 1)[0]

    for b in (int(x) for x in args.batches.split(",")):
        try:
            ids = br.rand_ids(b, 1024, gen).to("cuda")
            t1 = gen_time(ids, 1)
            tn = gen_time(ids, args.new_tokens)
            step = (tn - t1) / (args.new_tokens - 1)
            res["decode_batch"][str(b)] = {"seconds_per_step": round(step, 5), "tokens_per_second": round(b / step, 1)}
        except torch.cuda.OutOfMemoryError as e:
            res["decode_batch"][str(b)] = {"error": "out of memory: " + str(e)[:200]}
        torch.cuda.empty_cache()
        print(b, res["decode_batch"][str(b)], flush=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
