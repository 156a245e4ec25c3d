"""A channel's life: its run state, the supervisor that restarts it, the connection it
replaces when it ends, the wait for a full gateway backlog, and the bounded memories
(de-duplication among them) a channel keeps while it runs."""
