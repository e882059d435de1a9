"""End-to-end pieces of the workspace tests: agents the runners load by import path (``agl.testing.e2e.agents:
reward_agent``), the split and multi-host apps run as ``python -m``, the dashboard run and the proxy harness
that drives agent frameworks through the LLM proxy."""
