"""The turn core: what one process and the cluster both do with a message, written once.

Read in the order a turn runs:

- `triage`: what a message is (a stop, a command answered at once, a command that waits its
  turn, or text for the agent);
- `reply`: the reply that answers it (the agent's text, a command's text, the apology for a
  command that failed, a notice) as the `OutboundMessage` the channels send.

The core imports the domain (`bus`, `config`, `sessions`, `channels`), never the cluster, the
daemon or the command line: they build on it (`tests/test_layers.py` keeps it so).
"""
