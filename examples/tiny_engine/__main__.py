"""``python3 -m tiny_engine``: serve prompts from a file or stdin, or over HTTP.

Prompts: one per line, either text (UTF-8 bytes are the token ids) or a JSON list of token
ids. Each result is one JSON line: the generated ``tokens``, ``text``, ``logits_sha256`` (of
every sampled step's float32 logits, in order: equal hashes = bitwise equal logits), the hit
counts and ``ttft_s``. ``--serve`` instead answers ``POST /v1/completions`` (server.py).
With ``--kv-transfer-config`` (JSON text, or @file) the engine uses tierkv.connector.KVConnector.
"""

import argparse
import hashlib
import json
import sys

from .engine import Engine
from .model import ModelConfig
from .server import decode, encode, make_server


def logits_digest(r):
    h = hashlib.sha256()
    for lg in r.logits:
        h.update(lg.contiguous().numpy().tobytes())
    return h.hexdigest()


def _json_arg(text):
    if text.startswith("@"):
        with open(text[1:]) as f:
            return json.load(f)
    return json.loads(text)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m tiny_engine", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", default="-", help="file of prompts, one per line ('-': stdin)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--model", type=_json_arg, default={},
                    help="ModelConfig fields as JSON (or @file), e.g. '{\"n_layers\": 4}'")
    ap.add_argument("--num-blocks", type=int, default=256)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--kv-transfer-config", type=_json_arg, default=None)
    ap.add_argument("--serve", action="store_true", help="serve /v1/completions instead")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="0: a free port (printed)")
    ap.add_argument("--sequential", action="store_true",
                    help="run prompts one after another (default: all at once)")
    args = ap.parse_args(argv)
    engine = Engine(ModelConfig(**args.model), num_blocks=args.num_blocks,
                    block_size=args.block_size, kv_transfer_config=args.kv_transfer_config,
                    threads=args.threads)
    try:
        if args.serve:
            srv = make_server(engine, args.host, args.port)
            print(f"tiny_engine listening on http://{args.host}:{srv.server_address[1]}",
                  flush=True)
            try:
                srv.serve_forever()
            except KeyboardInterrupt:
                pass
            return 0
        f = sys.stdin if args.prompts == "-" else open(args.prompts)
        prompts = []
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("["):
                prompts.append(json.loads(line))
            else:
                prompts.append(encode(line, engine.cfg.vocab_size))
        batches = [[p] for p in prompts] if args.sequential else [prompts]
        for batch in batches:
            for r in engine.generate(batch, args.max_tokens):
                print(json.dumps({
                    "prompt_tokens": len(r.prompt_token_ids), "tokens": r.output_token_ids,
                    "text": decode(r.output_token_ids), "logits_sha256": logits_digest(r),
                    "local_hit_tokens": r.local_hit_tokens,
                    "external_hit_tokens": r.external_hit_tokens,
                    "load_error_blocks": r.load_error_blocks, "ttft_s": r.ttft}), flush=True)
        engine.close()  # waits for the saves
        if engine.worker is not None:
            print(json.dumps({"connector_stats": engine.worker.stats}), flush=True)
        return 0
    finally:
        engine.close()


if __name__ == "__main__":
    sys.exit(main())
