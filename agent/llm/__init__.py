"""LLM providers behind one small interface, the tools they may call, retries and pricing."""
