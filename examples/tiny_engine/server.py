"""An OpenAI-style ``POST /v1/completions`` endpoint over the engine (standard library only).

Request JSON: ``prompt`` (a string, encoded as UTF-8 bytes = token ids, or a list of token
ids), ``max_tokens`` (default 16), ``model`` (ignored). Sampling is greedy; other OpenAI fields
(temperature, n, stream, ...) other than their defaults are rejected with 400. The response
carries ``choices[0].text`` (the tokens as bytes, decoded with replacement),
``choices[0].token_ids`` and ``usage``, plus ``tierkv`` (local and tierkv hit tokens, TTFT).
"""

import json
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_UNSUPPORTED = {"n": 1, "stream": False, "best_of": 1, "echo": False, "logprobs": None,
                "temperature": 0}


def encode(text, vocab):
    ids = list(text.encode("utf-8"))
    if vocab < 256:
        raise ValueError("text prompts need a vocabulary of at least 256")
    return ids


def decode(ids):
    return bytes(t % 256 for t in ids).decode("utf-8", errors="replace")


def completion(engine, body):
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        tokens = encode(prompt, engine.cfg.vocab_size)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        tokens = prompt
    else:
        raise ValueError("prompt must be a non-empty string or list of token ids")
    for k, default in _UNSUPPORTED.items():
        if k in body and body[k] != default and not (k == "temperature" and body[k] == 0.0):
            raise ValueError(f"{k}={body[k]!r} is not supported (greedy, one choice)")
    max_tokens = body.get("max_tokens", 16)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError("max_tokens must be a positive integer")
    (r,) = engine.generate([tokens], max_tokens)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": engine.cfg.name,
        "choices": [{"index": 0, "text": decode(r.output_token_ids),
                     "token_ids": r.output_token_ids, "logprobs": None,
                     "finish_reason": "length"}],
        "usage": {"prompt_tokens": len(tokens), "completion_tokens": len(r.output_token_ids),
                  "total_tokens": len(tokens) + len(r.output_token_ids)},
        "tierkv": {"local_hit_tokens": r.local_hit_tokens,
                   "external_hit_tokens": r.external_hit_tokens, "ttft_s": r.ttft},
    }


def make_server(engine, host="127.0.0.1", port=0):
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": engine.cfg.name,
                                                             "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            if self.path != "/v1/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("body must be a JSON object")
                self._send(200, completion(engine, body))
            except (ValueError, json.JSONDecodeError) as e:
                self._send(400, {"error": {"message": str(e), "type": "invalid_request_error"}})

        def log_message(self, *args):
            pass

    return ThreadingHTTPServer((host, port), Handler)
