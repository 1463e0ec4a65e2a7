"""The research-agent service: the `autoresearch` command line and the experiment loop."""
