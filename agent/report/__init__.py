"""The morning report: one self-contained HTML page per tag, and a plot comparing tags."""
