# TEST DOUBLE (tierkv tests), not vLLM. Mirrors vllm/lora/request.py LoRARequest's identity
# fields only (vllm-project/vllm). Block hashes use lora_name (newer vLLM) - lora_int_id older.
from dataclasses import dataclass


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""
