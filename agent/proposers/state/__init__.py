"""The state message: the night as the LLM and CLI researchers are told it, in bounded space (message.py), its
earlier experiments grouped by the part of train.py they touched (groups.py)."""
