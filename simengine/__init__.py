"""simengine: a simulated vLLM 0.32 deployment on loopback.

It speaks what vLLM speaks (OpenAI routes, SSE framing, usage chunk, error bodies, vLLM
metric names, DCGM-exporter GPU gauges, vLLM-style logs) so that soaktop never needs a
"sim mode". Faults are injected by X-Request-Id glob or by time. See ``server.run_sim``
for in-process use and ``cli`` for the process contract.
"""

from simengine.config import SimConfig
from simengine.faults import FaultRule
from simengine.server import Sim, run_sim

__all__ = ["FaultRule", "Sim", "SimConfig", "run_sim"]
