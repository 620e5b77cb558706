"""tiny_engine: a small real transformer engine that reuses its KV cache through tierkv.

docs/engine.md describes it; ``python3 -m tiny_engine --help`` (with examples/ and the tierkv
package on PYTHONPATH) runs it.
"""

from .engine import Engine, Request, SchedulerOutput
from .model import ModelConfig, TinyModel

__all__ = ["Engine", "ModelConfig", "Request", "SchedulerOutput", "TinyModel"]
